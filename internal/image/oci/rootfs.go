package oci

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
)

// CleanRootfs copies a root filesystem tarball (as mmdebstrap or `tar -C
// root .` write it) to dst as an image layer: entry names relative to the
// root without "./", no entry for the root itself, and no device nodes,
// FIFOs or files under /dev, which the container runtime provides (and
// which an unprivileged runtime cannot create). Directories of /dev stay,
// as in Debian's images.
func CleanRootfs(dst io.Writer, src io.Reader) error {
	tr := tar.NewReader(src)
	tw := tar.NewWriter(dst)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("reading the root filesystem tarball: %w", err)
		}
		name := rootfsName(hdr.Name)
		if name == "" {
			continue
		}
		switch hdr.Typeflag {
		case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
			continue
		}
		if (name == "dev" || strings.HasPrefix(name, "dev/")) && hdr.Typeflag != tar.TypeDir {
			continue
		}
		hdr.Name = name
		if hdr.Typeflag == tar.TypeDir {
			hdr.Name += "/"
		}
		if hdr.Typeflag == tar.TypeLink {
			hdr.Linkname = rootfsName(hdr.Linkname)
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return fmt.Errorf("writing %s to the layer: %w", name, err)
		}
		if _, err := io.Copy(tw, tr); err != nil {
			return fmt.Errorf("copying %s to the layer: %w", name, err)
		}
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("closing the layer: %w", err)
	}
	return nil
}

// rootfsName is a tar entry name relative to the root, "" for the root.
func rootfsName(name string) string {
	name = path.Clean("/" + name)
	return strings.TrimPrefix(name, "/")
}
