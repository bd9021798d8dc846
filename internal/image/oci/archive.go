package oci

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// Write stores img in file as a docker-archive that holds it under ref
// (localhost/mcsd:v0.1.0). The file appears whole or not at all.
func Write(file, ref string, img v1.Image) error {
	tag, err := name.NewTag(ref, name.StrictValidation)
	if err != nil {
		return fmt.Errorf("image reference %q: %w (want a tagged name such as localhost/mcsd:v0.1.0)", ref, err)
	}
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		return fmt.Errorf("creating the directory of %s: %w", file, err)
	}
	tmp := file + ".tmp"
	if err := tarball.WriteToFile(tmp, tag, img); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("writing image %s to %s: %w", ref, file, err)
	}
	if err := os.Rename(tmp, file); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("writing image %s to %s: %w", ref, file, err)
	}
	return nil
}

// Read opens the single image of an archive that Write made, and returns it
// with the references the archive names it by.
func Read(file string) (v1.Image, []string, error) {
	opener := func() (io.ReadCloser, error) { return os.Open(file) }
	m, err := tarball.LoadManifest(opener)
	if err != nil {
		return nil, nil, fmt.Errorf("reading the manifest of image archive %s: %w", file, err)
	}
	if len(m) != 1 {
		return nil, nil, fmt.Errorf("image archive %s holds %d images, want 1", file, len(m))
	}
	img, err := tarball.Image(opener, nil)
	if err != nil {
		return nil, nil, fmt.Errorf("reading image archive %s: %w", file, err)
	}
	return img, m[0].RepoTags, nil
}

// Entry is one file of an image's flattened filesystem.
type Entry struct {
	Header *tar.Header
	// Data is a regular file's content, read only for the paths asked for.
	Data []byte
}

// Files lists the filesystem a container of img starts with (its layers
// applied in order, whiteouts honoured), by absolute path, and reads the
// content of the regular files at the given paths. It follows no links:
// /usr/sbin/iptables is the symbolic link Debian's alternatives make.
func Files(img v1.Image, read ...string) (map[string]Entry, error) {
	want := map[string]bool{}
	for _, p := range read {
		want[path.Clean(p)] = true
	}
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	files := map[string]Entry{}
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("reading the image's filesystem: %w", err)
		}
		p := path.Clean("/" + strings.TrimPrefix(hdr.Name, "./"))
		e := Entry{Header: hdr}
		if want[p] && hdr.Typeflag == tar.TypeReg {
			if e.Data, err = io.ReadAll(tr); err != nil {
				return nil, fmt.Errorf("reading %s from the image: %w", p, err)
			}
		}
		files[p] = e
	}
	return files, nil
}
