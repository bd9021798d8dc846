package debroot

import (
	"slices"
	"strings"
	"testing"
)

func TestArgs(t *testing.T) {
	s := Spec{Suite: "bookworm", Packages: []string{"nftables", "iptables"}, Check: [][]string{{"nft", "--version"}, {"sh", "-c", "echo 'hi'"}}, GOARCH: "arm64"}
	args, err := s.Args("/out/root.tar")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"--variant=minbase",
		"--architectures=arm64",
		"--include=iptables,nftables",
		"--dpkgopt=path-exclude=/usr/share/man/*",
		`--customize-hook=chroot "$1" 'nft' '--version'`,
		`--customize-hook=chroot "$1" 'sh' '-c' 'echo '\''hi'\'''`,
		"bookworm",
		"/out/root.tar",
		"deb http://deb.debian.org/debian bookworm main",
		"deb http://deb.debian.org/debian bookworm-updates main",
		"deb http://deb.debian.org/debian-security bookworm-security main",
	} {
		if !slices.Contains(args, want) {
			t.Errorf("mmdebstrap arguments lack %q:\n%s", want, strings.Join(args, "\n"))
		}
	}
	if i, j := slices.Index(args, "bookworm"), slices.Index(args, "/out/root.tar"); i < 0 || j != i+1 {
		t.Errorf("suite and target out of place: %q", args)
	}
}

func TestArgsRejectsWhatMmdebstrapCannotBuild(t *testing.T) {
	for name, s := range map[string]Spec{
		"no suite":               {Packages: []string{"nftables"}},
		"unknown architecture":   {Suite: "bookworm", GOARCH: "wasm"},
		"an empty check command": {Suite: "bookworm", Check: [][]string{{}}},
	} {
		if _, err := s.Args("x.tar"); err == nil {
			t.Errorf("%s: Args succeeded, want an error", name)
		}
	}
}

func TestKey(t *testing.T) {
	base := Spec{Suite: "bookworm", Packages: []string{"nftables", "iptables"}, GOARCH: "amd64"}
	key := func(s Spec) string {
		t.Helper()
		k, err := s.Key()
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	k := key(base)
	if !strings.HasPrefix(k, "bookworm-") {
		t.Errorf("key %q does not start with the suite", k)
	}
	reordered := base
	reordered.Packages = []string{"iptables", "nftables"}
	if key(reordered) != k {
		t.Error("the order of the packages changed the key")
	}
	for name, s := range map[string]Spec{
		"another package":      {Suite: "bookworm", Packages: []string{"nftables"}, GOARCH: "amd64"},
		"another suite":        {Suite: "trixie", Packages: base.Packages, GOARCH: "amd64"},
		"another architecture": {Suite: "bookworm", Packages: base.Packages, GOARCH: "arm64"},
		"another mirror":       {Suite: "bookworm", Packages: base.Packages, GOARCH: "amd64", Mirror: "http://mirror.example/debian"},
		"a check":              {Suite: "bookworm", Packages: base.Packages, GOARCH: "amd64", Check: [][]string{{"nft", "--version"}}},
	} {
		if key(s) == k {
			t.Errorf("%s gives the same key %s", name, k)
		}
	}
}
