// Command image builds mcsd's container image without Docker (`make
// image`): the stamped static binary on Debian bookworm-slim with nft and
// iptables, the image the Dockerfile describes, written as an archive that
// `ctr -n k8s.io images import` loads and `crane push` or `skopeo copy`
// publish.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/mcsd-io/mcsd/internal/image/mcsdimage"
	"github.com/mcsd-io/mcsd/internal/image/oci"
)

func main() {
	var o mcsdimage.Options
	var ref, out string
	flag.StringVar(&o.Version, "version", "", "version stamped into the binary and the labels (make version); required")
	flag.StringVar(&o.Revision, "revision", "", "commit stamped into the binary and the labels (git rev-parse HEAD); required")
	flag.StringVar(&ref, "image", "", "reference the archive holds the image under (default "+mcsdimage.DefaultRepository+":VERSION)")
	flag.StringVar(&out, "o", "bin/mcsd-image.tar", "archive to write")
	flag.StringVar(&o.Source, "source", ".", "mcsd's source: the directory of its go.mod")
	flag.StringVar(&o.Cache, "cache", os.Getenv("MCSD_CACHE"), "directory that keeps the Debian root filesystem between builds (MCSD_CACHE)")
	flag.StringVar(&o.GOARCH, "goarch", "", "architecture of the binary and the image (default this machine's)")
	flag.Parse()
	if flag.NArg() > 0 {
		fail(fmt.Errorf("unexpected arguments %q: every input is a flag (-h lists them)", flag.Args()))
	}
	if o.Version == "" || o.Revision == "" {
		fail(fmt.Errorf("-version and -revision are required (make image passes them)"))
	}
	if o.Cache == "" {
		o.Cache = filepath.Join(o.Source, ".cache")
	}
	if ref == "" {
		ref = mcsdimage.DefaultRepository + ":" + o.Version
	}
	o.Log = os.Stderr

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	start := time.Now()
	img, err := mcsdimage.Build(ctx, o)
	if err != nil {
		fail(err)
	}
	if err := oci.Write(out, ref, img); err != nil {
		fail(err)
	}
	fi, err := os.Stat(out)
	if err != nil {
		fail(err)
	}
	fmt.Printf("%s: %s (%.1f MiB) in %.1fs\n", out, ref, float64(fi.Size())/(1<<20), time.Since(start).Seconds())
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "image:", err)
	os.Exit(1)
}
