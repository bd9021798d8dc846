// Command images builds the container images the real-node tests run
// (test/lib/images) into the cache, before the tests need them, and prints
// each one's reference, archive, size and build time: `make test-images`.
// A second run finds them built.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/mcsd-io/mcsd/test/lib/images"
)

func main() {
	tags := flag.String("mcsd-tags", "", "comma-separated tags of mcsd images to build (default none)")
	only := flag.String("only", "", "comma-separated names of the test images to build: pause, coredns, echo (default all three)")
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "images: unexpected arguments %q (-h lists the flags)\n", flag.Args())
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	builds := []struct {
		name  string
		build func(context.Context) (images.Image, error)
	}{{"pause", images.Pause}, {"coredns", images.CoreDNS}, {"echo", images.Echo}}
	if *only != "" {
		wanted := strings.Split(*only, ",")
		kept := builds[:0]
		for _, b := range builds {
			if slices.Contains(wanted, b.name) {
				kept = append(kept, b)
			}
		}
		if len(kept) != len(wanted) {
			fmt.Fprintf(os.Stderr, "images: -only %q: the test images are pause, coredns and echo\n", *only)
			os.Exit(2)
		}
		builds = kept
	}
	for _, tag := range strings.Split(*tags, ",") {
		if tag = strings.TrimSpace(tag); tag != "" {
			builds = append(builds, struct {
				name  string
				build func(context.Context) (images.Image, error)
			}{"mcsd " + tag, func(ctx context.Context) (images.Image, error) { return images.MCSD(ctx, tag) }})
		}
	}
	for _, b := range builds {
		start := time.Now()
		img, err := b.build(ctx)
		if err != nil {
			fmt.Fprintf(os.Stderr, "images: %s: %v\n", b.name, err)
			os.Exit(1)
		}
		fi, err := os.Stat(img.Path)
		if err != nil {
			fmt.Fprintf(os.Stderr, "images: %s: %v\n", b.name, err)
			os.Exit(1)
		}
		fmt.Printf("%-40s %6.1f MiB %6.1fs  %s\n", img.Ref, float64(fi.Size())/(1<<20), time.Since(start).Seconds(), img.Path)
	}
}
