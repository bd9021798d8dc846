// Package images builds the container images the real-node tests run on
// kubelets, without Docker or a registry, as archives that a node's
// containerd imports (`ctr -n k8s.io images import PATH`):
//
//	func Pause(ctx) (Image, error)            // localhost/pause:3.10.2
//	func CoreDNS(ctx) (Image, error)          // localhost/coredns:v1.15.0
//	func Echo(ctx) (Image, error)             // localhost/mcsd-echo:<content>
//	func MCSD(ctx, tag string) (Image, error) // localhost/mcsd:<tag>
//	func MCSDFrom(ctx, root, tag string) (Image, error) // the same, from another source tree
//
// What each holds:
//
//   - Pause is Kubernetes' pause container: build/pause/linux/pause.c of the
//     k8s.io/kubernetes module test/tools pins, compiled with gcc -static as
//     Kubernetes does (needs gcc and libc6-dev); user 65535:65535,
//     entrypoint /pause. containerd must name it as its sandbox image.
//   - CoreDNS is the release test/tools/coredns pins, static; entrypoint
//     /coredns. It runs as root, so that it binds port 53 without the file
//     capability upstream's image gives the binary.
//   - Echo is test/cmd/echo, the harness pods' echo server as a program:
//     entrypoint /echo, identity from POD_IPS, POD_NAME, CLUSTER, ports from
//     ECHO_PORTS (default 8080); root.
//   - MCSD is what `make image` builds (internal/image/mcsdimage), the binary
//     stamped with tag as its version: two tags give two images for a
//     rolling update.
//
// Every image is kept in the cache ($MCSD_CACHE/images, else the
// repository's .cache/images) under a name that says what it was built
// from, so a second build, in this process or another, is free; concurrent
// callers wait for one build. References are under localhost/: a kubelet
// that tries to pull one fails at once. Building needs the Go toolchain and,
// the first time, gcc (Pause), mmdebstrap and Debian's archive (MCSD).
package images

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/mcsd-io/mcsd/internal/image/buildcache"
	"github.com/mcsd-io/mcsd/internal/image/oci"
	"github.com/mcsd-io/mcsd/test/lib/repo"
)

// Image is an importable image archive.
type Image struct {
	// Ref is the reference the archive holds the image under, such as
	// localhost/mcsd:v0.1.0: what a pod spec names.
	Ref string
	// Path is the archive, a docker-archive for `ctr images import`.
	Path string
}

// built remembers, per image, what this process already built: asking
// again costs nothing, and concurrent callers wait for one build. A failed
// build is not remembered, so a later caller tries again.
var built sync.Map // key -> *memo

type memo struct {
	mu  sync.Mutex
	img *Image
}

func once(key string, build func() (Image, error)) (Image, error) {
	v, _ := built.LoadOrStore(key, &memo{})
	m := v.(*memo)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.img != nil {
		return *m.img, nil
	}
	img, err := build()
	if err != nil {
		return Image{}, err
	}
	m.img = &img
	return img, nil
}

// cacheDir is where the archives are kept.
func cacheDir() (string, error) {
	c, err := repo.Cache()
	if err != nil {
		return "", err
	}
	return filepath.Join(c, "images"), nil
}

// archive returns the cached archive name (under cacheDir) holding the
// image build makes under ref, building it the first time.
func archive(name, ref string, build func() (v1.Image, error)) (Image, error) {
	dir, err := cacheDir()
	if err != nil {
		return Image{}, err
	}
	path, err := buildcache.Get(dir, name, func(tmp string) error {
		img, err := build()
		if err != nil {
			return err
		}
		return oci.Write(tmp, ref, img)
	})
	if err != nil {
		return Image{}, err
	}
	return Image{Ref: ref, Path: path}, nil
}

// singleBinary is an image of one static binary at /name, run as user.
func singleBinary(binary, name, user string) (v1.Image, error) {
	if err := requireStatic(binary); err != nil {
		return nil, err
	}
	layer, err := oci.FilesLayer("COPY "+name+" /"+name, oci.File{Path: "/" + name, Source: binary, Mode: 0o755})
	if err != nil {
		return nil, err
	}
	return oci.Build(oci.Config{Entrypoint: []string{"/" + name}, User: user}, layer)
}

// fileHash is the first 16 hex digits of a file's SHA-256: a cache name
// part that changes with the file.
func fileHash(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("hashing %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}
