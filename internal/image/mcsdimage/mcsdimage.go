// Package mcsdimage is the recipe of mcsd's container image: the image the
// Dockerfile describes (mcsd's static, stamped binary on Debian bookworm-slim
// with nft and iptables), built without Docker as an archive that a container
// runtime imports. `make image` and the real-node tests build it through
// Build; the package's tests hold the recipe and the Dockerfile to each
// other.
//
// It says what goes into the image; assembling and writing images is
// internal/image/oci's job, the Debian root filesystem internal/image/debroot's.
package mcsdimage

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/mcsd-io/mcsd/internal/image/debroot"
	"github.com/mcsd-io/mcsd/internal/image/oci"
)

// What the image holds and how it runs; the Dockerfile says the same.
const (
	// BinaryPath is where the binary is and what the image runs.
	BinaryPath = "/usr/local/bin/mcsd"
	// User is root: the proxier programs the node's nftables and
	// conntrack. The DaemonSet drops every capability but NET_ADMIN.
	User = "0:0"
	// SourceURL is the org.opencontainers.image.source label.
	SourceURL = "https://github.com/mcsd-io/mcsd"
	// DefaultRepository names images built here: under localhost/, so that a
	// node that tries to pull one fails at once.
	DefaultRepository = "localhost/mcsd"
	// versionPkg holds the stamped version (internal/version).
	versionPkg = "github.com/mcsd-io/mcsd/internal/version"
)

// Base is the root filesystem under the binary: bookworm-slim with nft
// (the proxier needs nft >= 1.0.1: bookworm has 1.0.6) and iptables for
// --proxier-mode=iptables (bookworm's default, the nft-backed iptables-nft),
// both checked to run.
var Base = debroot.Spec{
	Suite:    "bookworm",
	Packages: []string{"nftables", "iptables"},
	Check:    [][]string{{"nft", "--version"}, {"iptables", "--version"}},
}

// Labels are the image's OCI annotations of where and what it was built from.
func Labels(version, revision string) map[string]string {
	return map[string]string{
		"org.opencontainers.image.source":   SourceURL,
		"org.opencontainers.image.version":  version,
		"org.opencontainers.image.revision": revision,
	}
}

// Options say which build of mcsd goes into the image.
type Options struct {
	// Source is mcsd's module root, the directory of its go.mod.
	Source string
	// Version and Revision are stamped into the binary (mcsd --version)
	// and the labels: `git describe --tags --always --dirty` and the
	// commit, as the Makefile computes them.
	Version, Revision string
	// GOARCH of the binary and the image; default runtime.GOARCH.
	GOARCH string
	// Cache is where the Debian root filesystem is kept between builds
	// (the Makefile's MCSD_CACHE).
	Cache string
	// Log receives the progress of a first build of the root filesystem;
	// nil discards it.
	Log io.Writer
}

func (o Options) goarch() string {
	if o.GOARCH != "" {
		return o.GOARCH
	}
	return runtime.GOARCH
}

// GoBuildArgs are the arguments of `go build` that make the image's binary,
// the Dockerfile's: static (with CGO_ENABLED=0 in the environment), no local
// paths, no symbol tables, stamped.
func GoBuildArgs(version, revision, out string) []string {
	return []string{"build", "-trimpath",
		"-ldflags=-s -w -X " + versionPkg + ".version=" + version + " -X " + versionPkg + ".revision=" + revision,
		"-o", out, "./cmd/mcsd"}
}

// Binary compiles mcsd for the image into out.
func Binary(ctx context.Context, o Options, out string) error {
	if o.Version == "" || o.Revision == "" {
		return fmt.Errorf("building mcsd's binary: a version and a revision to stamp are required")
	}
	cmd := exec.CommandContext(ctx, "go", GoBuildArgs(o.Version, o.Revision, out)...)
	cmd.Dir = o.Source
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+o.goarch())
	if msg, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("building mcsd's binary from %s: %w\n%s", o.Source, err, msg)
	}
	return nil
}

// BaseLayer returns the root filesystem layer, building it into o.Cache on
// first use (a minute or so; needs mmdebstrap).
func BaseLayer(ctx context.Context, o Options) (string, error) {
	base := Base
	base.GOARCH = o.goarch()
	log := o.Log
	if log == nil {
		log = io.Discard
	}
	return debroot.Layer(ctx, filepath.Join(o.Cache, "debroot"), base, log)
}

// Image is mcsd's image around binary, built by Binary with the same
// options.
func Image(ctx context.Context, o Options, binary string) (v1.Image, error) {
	baseLayer, err := BaseLayer(ctx, o)
	if err != nil {
		return nil, err
	}
	base, err := oci.TarLayer("mmdebstrap "+Base.Suite+" (slim) + "+strings.Join(Base.Packages, " "), baseLayer)
	if err != nil {
		return nil, err
	}
	bin, err := oci.FilesLayer("COPY mcsd "+BinaryPath, oci.File{Path: BinaryPath, Source: binary, Mode: 0o755})
	if err != nil {
		return nil, err
	}
	return oci.Build(oci.Config{
		Architecture: o.goarch(),
		Entrypoint:   []string{BinaryPath},
		User:         User,
		Env:          []string{"PATH=" + oci.DefaultPath},
		Labels:       Labels(o.Version, o.Revision),
	}, base, bin)
}

// Build compiles mcsd and returns its image. The binary is built in a
// temporary directory and read into the image before Build returns.
func Build(ctx context.Context, o Options) (v1.Image, error) {
	tmp, err := os.MkdirTemp("", "mcsd-image-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	binary := filepath.Join(tmp, "mcsd")
	if err := Binary(ctx, o, binary); err != nil {
		return nil, err
	}
	return Image(ctx, o, binary)
}
