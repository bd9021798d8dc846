package images

import (
	"context"
	"os"
	"path/filepath"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/mcsd-io/mcsd/test/lib/repo"
)

// Echo is test/cmd/echo alone in an image, tagged with a hash of the
// binary: a change to the echo server is a new tag.
func Echo(ctx context.Context) (Image, error) {
	return once("echo", func() (Image, error) {
		root, err := repo.Root()
		if err != nil {
			return Image{}, err
		}
		tmp, err := os.MkdirTemp("", "echo-")
		if err != nil {
			return Image{}, err
		}
		defer os.RemoveAll(tmp)
		bin := filepath.Join(tmp, "echo")
		if err := goBuild(ctx, root, "./test/cmd/echo", bin); err != nil {
			return Image{}, err
		}
		sum, err := fileHash(bin)
		if err != nil {
			return Image{}, err
		}
		return archive("echo-"+sum+".tar", "localhost/mcsd-echo:"+sum, func() (v1.Image, error) {
			return singleBinary(bin, "echo", "0:0")
		})
	})
}
