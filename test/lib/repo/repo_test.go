package repo

import (
	"os"
	"path/filepath"
	"testing"
)

func TestRootIsTheModuleAboveThePackage(t *testing.T) {
	root, err := Root()
	if err != nil {
		t.Fatal(err)
	}
	want, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	if root != want {
		t.Errorf("Root() = %s, want %s", root, want)
	}
}

func TestCache(t *testing.T) {
	t.Run("MCSD_CACHE wins", func(t *testing.T) {
		t.Setenv("MCSD_CACHE", "/somewhere/cache")
		if c, err := Cache(); err != nil || c != "/somewhere/cache" {
			t.Errorf("Cache() = %s, %v", c, err)
		}
	})
	t.Run("a relative one from the repository's root", func(t *testing.T) {
		t.Setenv("MCSD_CACHE", "build/cache")
		root, err := Root()
		if err != nil {
			t.Fatal(err)
		}
		if c, err := Cache(); err != nil || c != filepath.Join(root, "build", "cache") {
			t.Errorf("Cache() = %s, %v", c, err)
		}
	})
	t.Run("without it, the repository's .cache", func(t *testing.T) {
		t.Setenv("MCSD_CACHE", "")
		os.Unsetenv("MCSD_CACHE")
		root, err := Root()
		if err != nil {
			t.Fatal(err)
		}
		if c, err := Cache(); err != nil || c != filepath.Join(root, ".cache") {
			t.Errorf("Cache() = %s, %v", c, err)
		}
	})
}
