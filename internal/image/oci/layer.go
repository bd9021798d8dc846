package oci

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// epoch is every added file's modification time: a layer built twice from
// the same files is the same layer.
var epoch = time.Unix(0, 0).UTC()

// File is one regular file of a layer.
type File struct {
	// Path is where the file is in the image, absolute (/usr/local/bin/mcsd).
	Path string
	// Source is the file on disk to copy; Data, when Source is empty, is
	// the content itself.
	Source string
	Data   []byte
	// Mode is the permission bits; 0 means Source's, or 0644 for Data.
	Mode fs.FileMode
}

// FilesLayer is a layer holding files, owned by root, with their parent
// directories (0755, as `COPY` makes them: over a lower layer's directory of
// another mode, this one wins).
func FilesLayer(createdBy string, files ...File) (Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dirs := map[string]bool{}
	for _, f := range files {
		name, err := layerPath(f.Path)
		if err != nil {
			return Layer{}, err
		}
		data, mode := f.Data, f.Mode
		if f.Source != "" {
			if data, err = os.ReadFile(f.Source); err != nil {
				return Layer{}, fmt.Errorf("reading %s for %s: %w", f.Source, f.Path, err)
			}
			if mode == 0 {
				fi, err := os.Stat(f.Source)
				if err != nil {
					return Layer{}, fmt.Errorf("reading %s for %s: %w", f.Source, f.Path, err)
				}
				mode = fi.Mode().Perm()
			}
		}
		if mode == 0 {
			mode = 0o644
		}
		if err := writeParents(tw, dirs, name); err != nil {
			return Layer{}, err
		}
		hdr := &tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: int64(mode.Perm()), Size: int64(len(data)), ModTime: epoch, Format: tar.FormatPAX}
		if err := tw.WriteHeader(hdr); err != nil {
			return Layer{}, fmt.Errorf("adding %s to the layer: %w", f.Path, err)
		}
		if _, err := tw.Write(data); err != nil {
			return Layer{}, fmt.Errorf("adding %s to the layer: %w", f.Path, err)
		}
	}
	if err := tw.Close(); err != nil {
		return Layer{}, fmt.Errorf("closing the layer: %w", err)
	}
	return readerLayer(createdBy, buf.Bytes())
}

// DirLayer is a layer holding the tree under dir on disk at dest in the
// image (dest "/" for a root filesystem), owned by root, with the modes and
// symbolic links dir has. Anything but directories, regular files and
// symbolic links is an error.
func DirLayer(createdBy, dir, dest string) (Layer, error) {
	if !path.IsAbs(dest) {
		return Layer{}, fmt.Errorf("image path %q is not absolute", dest)
	}
	base := strings.TrimPrefix(path.Clean(dest), "/")
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dirs := map[string]bool{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		name := path.Join(base, filepath.ToSlash(rel))
		if name == "." {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if err := writeParents(tw, dirs, name); err != nil {
			return err
		}
		hdr := &tar.Header{Name: name, Mode: int64(fi.Mode().Perm()), ModTime: epoch, Format: tar.FormatPAX}
		switch {
		case fi.IsDir():
			hdr.Typeflag, hdr.Name = tar.TypeDir, name+"/"
			dirs[name] = true
			return tw.WriteHeader(hdr)
		case fi.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			hdr.Typeflag, hdr.Linkname = tar.TypeSymlink, target
			return tw.WriteHeader(hdr)
		case fi.Mode().IsRegular():
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			hdr.Typeflag, hdr.Size = tar.TypeReg, int64(len(data))
			if err := tw.WriteHeader(hdr); err != nil {
				return err
			}
			_, err = tw.Write(data)
			return err
		}
		return fmt.Errorf("%s is neither a directory, a regular file nor a symbolic link", p)
	})
	if err != nil {
		return Layer{}, fmt.Errorf("packing %s into a layer at %s: %w", dir, dest, err)
	}
	if err := tw.Close(); err != nil {
		return Layer{}, fmt.Errorf("closing the layer: %w", err)
	}
	return readerLayer(createdBy, buf.Bytes())
}

// TarLayer is the layer in a tar file, plain or gzip-compressed, whose
// entries are already named relative to the image's root (see RootfsTar). A
// compressed file is used as it is, so its digest costs one read.
func TarLayer(createdBy, file string) (Layer, error) {
	l, err := tarball.LayerFromFile(file)
	if err != nil {
		return Layer{}, fmt.Errorf("reading layer %s: %w", file, err)
	}
	return Layer{Layer: l, CreatedBy: createdBy}, nil
}

func readerLayer(createdBy string, tarData []byte) (Layer, error) {
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(tarData)), nil
	})
	if err != nil {
		return Layer{}, fmt.Errorf("making layer %q: %w", createdBy, err)
	}
	return Layer{Layer: l, CreatedBy: createdBy}, nil
}

// layerPath turns an absolute image path into a tar entry name.
func layerPath(p string) (string, error) {
	if !path.IsAbs(p) {
		return "", fmt.Errorf("image path %q is not absolute", p)
	}
	name := strings.TrimPrefix(path.Clean(p), "/")
	if name == "" {
		return "", fmt.Errorf("image path %q names the root, not a file", p)
	}
	return name, nil
}

// writeParents adds the directories above name that the layer lacks, so
// that a runtime unpacking it creates them with known modes.
func writeParents(tw *tar.Writer, done map[string]bool, name string) error {
	var parents []string
	for d := path.Dir(name); d != "." && !done[d]; d = path.Dir(d) {
		parents = append(parents, d)
	}
	slices.Reverse(parents)
	for _, d := range parents {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: 0o755, ModTime: epoch, Format: tar.FormatPAX}); err != nil {
			return fmt.Errorf("adding directory /%s to the layer: %w", d, err)
		}
		done[d] = true
	}
	return nil
}
