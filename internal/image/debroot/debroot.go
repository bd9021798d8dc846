// Package debroot builds the root filesystem of a Debian container image
// without Docker: what Debian's -slim images hold (the required packages and
// apt, without documentation, manual pages and translations) plus chosen
// packages, installed by mmdebstrap from Debian's archive, checked by
// running commands inside it, and kept as an image layer in a build cache.
//
// It only builds layers; what goes into an image is its callers' business
// (internal/image/mcsdimage).
package debroot

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"

	"github.com/mcsd-io/mcsd/internal/image/buildcache"
	"github.com/mcsd-io/mcsd/internal/image/oci"
)

// Debian's archive, as Debian's own images name it.
const (
	DefaultMirror         = "http://deb.debian.org/debian"
	DefaultSecurityMirror = "http://deb.debian.org/debian-security"
)

// layerFormat changes whenever what Layer writes changes for the same Spec,
// so that cached layers of the old form are not taken.
const layerFormat = "1"

// slimExcludes are the dpkg path filters of Debian's -slim images. They stay
// in the image (/etc/dpkg/dpkg.cfg.d/99mmdebstrap), so packages installed
// later are slim too, as in the -slim images.
var slimExcludes = []string{
	"path-exclude=/usr/share/doc/*",
	"path-include=/usr/share/doc/*/copyright",
	"path-exclude=/usr/share/groff/*",
	"path-exclude=/usr/share/info/*",
	"path-exclude=/usr/share/linda/*",
	"path-exclude=/usr/share/lintian/*",
	"path-exclude=/usr/share/locale/*",
	"path-include=/usr/share/locale/locale.alias",
	"path-exclude=/usr/share/man/*",
}

// Spec says what a root filesystem holds.
type Spec struct {
	// Suite is the Debian release, such as bookworm. Its -updates and
	// -security suites are used too, as in Debian's images.
	Suite string
	// Packages are installed on top of the slim base, with their
	// dependencies but not their recommendations.
	Packages []string
	// Check holds commands (argv) that must succeed inside the finished
	// root filesystem (chroot), such as {"nft", "--version"}.
	Check [][]string
	// Mirror and SecurityMirror default to Debian's archive.
	Mirror, SecurityMirror string
	// GOARCH is the architecture of the image, as Go names it; default
	// runtime.GOARCH.
	GOARCH string
}

// debianArch maps Go's architecture names to Debian's.
var debianArch = map[string]string{
	"amd64": "amd64", "arm64": "arm64", "arm": "armhf", "386": "i386",
	"ppc64le": "ppc64el", "s390x": "s390x", "riscv64": "riscv64",
}

// Args is the mmdebstrap command line that builds the root filesystem into
// target (a .tar file).
func (s Spec) Args(target string) ([]string, error) {
	if s.Suite == "" {
		return nil, fmt.Errorf("debroot: no Debian suite given (such as bookworm)")
	}
	goarch := s.GOARCH
	if goarch == "" {
		goarch = runtime.GOARCH
	}
	arch, ok := debianArch[goarch]
	if !ok {
		return nil, fmt.Errorf("debroot: no Debian architecture for GOARCH %q", goarch)
	}
	mirror, security := s.Mirror, s.SecurityMirror
	if mirror == "" {
		mirror = DefaultMirror
	}
	if security == "" {
		security = DefaultSecurityMirror
	}
	args := []string{
		// debootstrap's minbase: Essential, Priority: required and apt,
		// what Debian's images start from.
		"--variant=minbase",
		"--architectures=" + arch,
		// /bin -> usr/bin as Debian's images have it, without the
		// usrmerge package (and the perl it pulls in) that mmdebstrap
		// otherwise installs for bookworm.
		"--hook-dir=/usr/share/mmdebstrap/hooks/merged-usr",
	}
	if len(s.Packages) > 0 {
		pkgs := slices.Sorted(slices.Values(s.Packages))
		args = append(args, "--include="+strings.Join(pkgs, ","))
	}
	for _, ex := range slimExcludes {
		args = append(args, "--dpkgopt="+ex)
	}
	// The host's resolver and name are no part of an image: the runtime
	// provides them.
	args = append(args, `--customize-hook=rm -f "$1/etc/resolv.conf" "$1/etc/hostname"`)
	for _, c := range s.Check {
		if len(c) == 0 {
			return nil, fmt.Errorf("debroot: an empty check command")
		}
		args = append(args, `--customize-hook=chroot "$1" `+shellQuote(c))
	}
	args = append(args, s.Suite, target,
		fmt.Sprintf("deb %s %s main", mirror, s.Suite),
		fmt.Sprintf("deb %s %s-updates main", mirror, s.Suite),
		fmt.Sprintf("deb %s %s-security main", security, s.Suite))
	return args, nil
}

// Key names the layer of s in a cache: a hash of everything that goes into
// it. Debian's updates to a suite do not change it: remove the cache entry
// to take them.
func (s Spec) Key() (string, error) {
	args, err := s.Args("TARGET")
	if err != nil {
		return "", err
	}
	h := sha256.New()
	fmt.Fprintf(h, "layer format %s\n", layerFormat)
	for _, a := range args {
		fmt.Fprintf(h, "%q\n", a)
	}
	return s.Suite + "-" + hex.EncodeToString(h.Sum(nil))[:16], nil
}

// Layer returns the gzip-compressed layer tarball of s under cacheDir,
// building it the first time (about a minute: mmdebstrap downloads and
// installs the packages). mmdebstrap's progress goes to log. Needs
// mmdebstrap (Debian package mmdebstrap) and root or unprivileged user
// namespaces.
func Layer(ctx context.Context, cacheDir string, s Spec, log io.Writer) (string, error) {
	key, err := s.Key()
	if err != nil {
		return "", err
	}
	if _, err := exec.LookPath("mmdebstrap"); err != nil {
		return "", fmt.Errorf("building a Debian %s root filesystem needs mmdebstrap (apt-get install mmdebstrap): %w", s.Suite, err)
	}
	return buildcache.Get(cacheDir, key+".tar.gz", func(tmp string) error {
		raw := tmp + ".raw.tar"
		defer os.Remove(raw)
		args, err := s.Args(raw)
		if err != nil {
			return err
		}
		var tail bytes.Buffer
		cmd := exec.CommandContext(ctx, "mmdebstrap", args...)
		cmd.Stdout, cmd.Stderr = io.MultiWriter(log, &tail), io.MultiWriter(log, &tail)
		// Files dated 1970, no build-time logs: the same packages give
		// the same layer.
		cmd.Env = append(os.Environ(), "SOURCE_DATE_EPOCH=0")
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("mmdebstrap %s with %v failed: %w\n%s", s.Suite, s.Packages, err, lastLines(tail.String(), 20))
		}
		return compress(tmp, raw)
	})
}

// compress writes the cleaned layer of the root filesystem tarball raw to
// dst, gzip-compressed: stored compressed, it is used as it is in every
// image built from it.
func compress(dst, raw string) error {
	in, err := os.Open(raw)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	defer out.Close()
	zw, err := gzip.NewWriterLevel(out, gzip.DefaultCompression)
	if err != nil {
		return err
	}
	if err := oci.CleanRootfs(zw, in); err != nil {
		return fmt.Errorf("turning %s into a layer: %w", filepath.Base(raw), err)
	}
	if err := zw.Close(); err != nil {
		return err
	}
	return out.Close()
}

func shellQuote(argv []string) string {
	q := make([]string, len(argv))
	for i, a := range argv {
		q[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return strings.Join(q, " ")
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
