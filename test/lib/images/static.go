package images

import (
	"debug/elf"
	"fmt"
)

// requireStatic fails unless binary is a statically linked ELF program: an
// image of the binary alone has no dynamic loader or libraries to offer.
func requireStatic(binary string) error {
	f, err := elf.Open(binary)
	if err != nil {
		return fmt.Errorf("reading %s: %w", binary, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("%s is dynamically linked (it names an ELF interpreter): build it static (CGO_ENABLED=0, gcc -static)", binary)
		}
	}
	if libs, err := f.ImportedLibraries(); err == nil && len(libs) > 0 {
		return fmt.Errorf("%s needs shared libraries %v: build it static", binary, libs)
	}
	return nil
}
