package harness

import (
	"context"
	"errors"
	"os"
)

// pauseImage is the sandbox image of every real node.
// TEMPORARY until test/images lands.
func pauseImage(ctx context.Context) (Image, error) {
	p := os.Getenv("MCSD_PAUSE_TAR")
	if p == "" {
		return Image{}, errors.New("MCSD_PAUSE_TAR unset")
	}
	return Image{Ref: "localhost/pause:exp", Path: p}, nil
}
