package version

import (
	"runtime"
	"strings"
	"testing"
)

func TestGet(t *testing.T) {
	t.Run("an unstamped build says so and names its toolchain", func(t *testing.T) {
		info := Get()
		if info.Version != Unstamped {
			t.Fatalf("version %q, want %q for a build without -ldflags", info.Version, Unstamped)
		}
		if info.GoVersion != runtime.Version() || info.Revision == "" {
			t.Fatalf("info %+v", info)
		}
	})
	t.Run("a stamped build reports the stamped values", func(t *testing.T) {
		defer func(v, r string) { version, revision = v, r }(version, revision)
		version, revision = "v1.2.3-4-gabcdef0-dirty", "abcdef0123456789"
		info := Get()
		if info.Version != "v1.2.3-4-gabcdef0-dirty" || info.Revision != "abcdef0123456789" {
			t.Fatalf("info %+v", info)
		}
		if s := info.String(); !strings.Contains(s, "v1.2.3-4-gabcdef0-dirty") || !strings.Contains(s, "abcdef0123456789") || !strings.Contains(s, runtime.Version()) {
			t.Fatalf("String() = %q, want version, revision and Go version", s)
		}
	})
}
