package images

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/mcsd-io/mcsd/internal/image/mcsdimage"
	"github.com/mcsd-io/mcsd/test/lib/repo"
)

// staleAfter is how long an mcsd archive of a tag stays in the cache
// unused once another build of the same tag replaced it: every source
// change makes a new one.
const staleAfter = 24 * time.Hour

// MCSD is mcsd's image as `make image` builds it, from this source tree,
// with tag as the binary's version and the image's tag.
func MCSD(ctx context.Context, tag string) (Image, error) {
	root, err := repo.Root()
	if err != nil {
		return Image{}, err
	}
	return MCSDFrom(ctx, root, tag)
}

// MCSDFrom is mcsd's image built as MCSD builds it, from the source tree
// at root: another commit checked out, such as the one an upgrade starts
// from.
func MCSDFrom(ctx context.Context, root, tag string) (Image, error) {
	ref := mcsdimage.DefaultRepository + ":" + tag
	if _, err := name.NewTag(ref, name.StrictValidation); err != nil {
		return Image{}, fmt.Errorf("mcsd image tag %q: %w", tag, err)
	}
	return once("mcsd:"+root+":"+tag, func() (Image, error) {
		cache, err := repo.Cache()
		if err != nil {
			return Image{}, err
		}
		o := mcsdimage.Options{Source: root, Version: tag, Revision: revision(ctx, root), Cache: cache, Log: os.Stderr}
		tmp, err := os.MkdirTemp("", "mcsd-image-")
		if err != nil {
			return Image{}, err
		}
		defer os.RemoveAll(tmp)
		bin := filepath.Join(tmp, "mcsd")
		if err := mcsdimage.Binary(ctx, o, bin); err != nil {
			return Image{}, err
		}
		sum, err := fileHash(bin)
		if err != nil {
			return Image{}, err
		}
		base := mcsdimage.Base
		base.GOARCH = o.GOARCH
		baseKey, err := base.Key()
		if err != nil {
			return Image{}, err
		}
		entry := filepath.Join("mcsd", tag, sum+"-"+baseKey+".tar")
		img, err := archive(entry, ref, func() (v1.Image, error) { return mcsdimage.Image(ctx, o, bin) })
		if err != nil {
			return Image{}, err
		}
		pruneStale(img.Path)
		return img, nil
	})
}

// revision is the commit of the source tree, as the Makefile stamps it.
func revision(ctx context.Context, root string) string {
	cmd := exec.CommandContext(ctx, "git", "rev-parse", "HEAD")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(out))
}

// pruneStale marks keep as used and removes the archives next to it (of
// the same tag) that have not been used for staleAfter: other source trees
// sharing the cache keep theirs while they use them.
func pruneStale(keep string) {
	now := time.Now()
	_ = os.Chtimes(keep, now, now)
	matches, _ := filepath.Glob(filepath.Join(filepath.Dir(keep), "*.tar"))
	for _, m := range matches {
		if m == keep {
			continue
		}
		if fi, err := os.Stat(m); err == nil && now.Sub(fi.ModTime()) > staleAfter {
			_ = os.Remove(m)
			_ = os.Remove(m + ".lock")
		}
	}
}
