// Command manifests writes manifests/mcsd from the Helm chart charts/mcsd
// (make manifests), so that the chart is the one place mcsd's member
// objects are edited and kubectl apply -k installs what helm install does.
// It replaces every generated file and removes generated files the chart
// no longer renders; files written by hand (kustomization.yaml,
// coredns-snippet.yaml) are left alone.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/mcsd-io/mcsd/charts"
)

func main() {
	dir := flag.String("dir", "manifests/mcsd", "directory to write")
	flag.Parse()
	if flag.NArg() > 0 {
		fail(fmt.Errorf("unexpected arguments %q: every input is a flag (-h lists them)", flag.Args()))
	}
	files, err := charts.Manifests()
	if err != nil {
		fail(err)
	}
	existing, err := filepath.Glob(filepath.Join(*dir, "*.yaml"))
	if err != nil {
		fail(err)
	}
	for _, path := range existing {
		if _, ok := files[filepath.Base(path)]; ok {
			continue
		}
		data, err := os.ReadFile(path)
		if err != nil {
			fail(err)
		}
		if bytes.HasPrefix(data, []byte(charts.GeneratedMarker)) {
			if err := os.Remove(path); err != nil {
				fail(err)
			}
		}
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(*dir, name), data, 0o644); err != nil {
			fail(err)
		}
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "manifests:", err)
	os.Exit(1)
}
