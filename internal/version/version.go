// Package version says which build of mcsd is running: the version and
// commit stamped in at link time, and the Go toolchain. It holds no logic
// and must not depend on any other mcsd package.
//
// The Makefile and the Dockerfile stamp both values from git:
//
//	go build -ldflags "-X github.com/mcsd-io/mcsd/internal/version.version=$(git describe --tags --always --dirty) \
//	    -X github.com/mcsd-io/mcsd/internal/version.revision=$(git rev-parse HEAD)" ./cmd/mcsd
//
// A build that is not stamped (go build, go run, go test) reports Unstamped
// and, when the Go toolchain recorded it, the commit from the build's VCS
// information.
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Unstamped is the version of a build made without the Makefile's or the
// Dockerfile's -ldflags.
const Unstamped = "v0.0.0-dev"

// Set at link time with -ldflags -X; see the package comment.
var (
	version  string
	revision string
)

// Info is one build's identity.
type Info struct {
	// Version is `git describe --tags --always --dirty` of the source, or
	// Unstamped.
	Version string `json:"version"`
	// Revision is the full commit hash, or "unknown".
	Revision string `json:"revision"`
	// GoVersion is the toolchain that built the binary, such as go1.26.0.
	GoVersion string `json:"goVersion"`
}

// Get returns the running binary's identity.
func Get() Info {
	info := Info{Version: version, Revision: revision, GoVersion: runtime.Version()}
	if info.Version == "" {
		info.Version = Unstamped
	}
	if info.Revision == "" {
		info.Revision = vcsRevision()
	}
	return info
}

// String is the line `mcsd --version` prints.
func (i Info) String() string {
	return fmt.Sprintf("%s (revision %s, %s)", i.Version, i.Revision, i.GoVersion)
}

// vcsRevision is the commit the Go toolchain recorded at build time (it
// does with -buildvcs, the default in a git checkout), or "unknown".
func vcsRevision() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	rev, dirty := "", false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	switch {
	case rev == "":
		return "unknown"
	case dirty:
		return rev + "-dirty"
	}
	return rev
}
