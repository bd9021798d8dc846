package images

import (
	"context"
	"fmt"
	"path/filepath"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/mcsd-io/mcsd/test/lib/repo"
)

// CoreDNSBinary builds the CoreDNS release test/tools/coredns pins, static,
// once per version into the cache (a few minutes the first time), and
// returns its path.
func CoreDNSBinary(ctx context.Context) (string, error) {
	return repo.Tool(ctx, "coredns", "coredns")
}

// CoreDNS is the pinned CoreDNS alone in an image, tagged with its release.
func CoreDNS(ctx context.Context) (Image, error) {
	return once("coredns", func() (Image, error) {
		bin, err := CoreDNSBinary(ctx)
		if err != nil {
			return Image{}, err
		}
		version := filepath.Base(filepath.Dir(bin))
		sum, err := fileHash(bin)
		if err != nil {
			return Image{}, err
		}
		return archive(fmt.Sprintf("coredns-%s-%s.tar", version, sum), "localhost/coredns:"+version, func() (v1.Image, error) {
			return singleBinary(bin, "coredns", "0:0")
		})
	})
}
