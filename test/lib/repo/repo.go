// Package repo finds mcsd's source tree and the cache where the test suites
// and tools keep what they build (Kubernetes components, CoreDNS, images),
// from a test or a tool run anywhere inside the tree. It only finds paths.
package repo

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
)

const modulePath = "github.com/mcsd-io/mcsd"

// Root is the module root, found from the working directory, which is a
// package directory under go test and anywhere inside the tree for a tool.
func Root() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && bytes.HasPrefix(data, []byte("module "+modulePath+"\n")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("not inside the %s module; run from the repository", modulePath)
		}
		dir = parent
	}
}

// Cache is $MCSD_CACHE, which the Makefile exports (and worktrees share), or
// else the repository's .cache. A relative $MCSD_CACHE is taken from the
// repository's root, as make takes it: go test runs each package in its own
// directory, so from the working directory it would be one cache per
// package, each built anew.
func Cache() (string, error) {
	c := os.Getenv("MCSD_CACHE")
	if filepath.IsAbs(c) {
		return c, nil
	}
	root, err := Root()
	if err != nil {
		return "", err
	}
	if c == "" {
		c = ".cache"
	}
	return filepath.Join(root, c), nil
}
