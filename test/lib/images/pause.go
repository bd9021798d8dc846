package images

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/mcsd-io/mcsd/test/lib/repo"
)

// Pause is Kubernetes' pause image, compiled from the source of the
// k8s.io/kubernetes module test/tools pins, tagged as Kubernetes tags it
// (build/pause/Makefile's TAG).
func Pause(ctx context.Context) (Image, error) {
	return once("pause", func() (Image, error) {
		root, err := repo.Root()
		if err != nil {
			return Image{}, err
		}
		src, version, err := kubernetesSource(ctx, filepath.Join(root, "test", "tools"))
		if err != nil {
			return Image{}, err
		}
		tag, err := makeVariable(filepath.Join(src, "build", "pause", "Makefile"), "TAG")
		if err != nil {
			return Image{}, err
		}
		return archive(fmt.Sprintf("pause-%s-%s.tar", tag, version), "localhost/pause:"+tag, func() (v1.Image, error) {
			tmp, err := os.MkdirTemp("", "pause-")
			if err != nil {
				return nil, err
			}
			defer os.RemoveAll(tmp)
			bin := filepath.Join(tmp, "pause")
			// build/pause/Makefile's CFLAGS; its REV is a git describe
			// of Kubernetes' tree, here the module version.
			cmd := exec.CommandContext(ctx, "gcc", "-Os", "-Wall", "-Werror", "-static",
				"-DVERSION=v"+tag+"-"+version, "-o", bin, filepath.Join(src, "build", "pause", "linux", "pause.c"))
			if msg, err := cmd.CombinedOutput(); err != nil {
				return nil, fmt.Errorf("compiling pause (needs gcc and libc6-dev): %w\n%s", err, msg)
			}
			return singleBinary(bin, "pause", "65535:65535")
		})
	})
}

// kubernetesSource downloads (once, into the module cache) the
// k8s.io/kubernetes module the tools module at dir requires, and returns its
// directory and version.
func kubernetesSource(ctx context.Context, dir string) (string, string, error) {
	cmd := exec.CommandContext(ctx, "go", "mod", "download", "-json", "k8s.io/kubernetes")
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		return "", "", fmt.Errorf("downloading the k8s.io/kubernetes module of %s: %w", dir, err)
	}
	var m struct{ Dir, Version, Error string }
	if err := json.Unmarshal(out, &m); err != nil {
		return "", "", fmt.Errorf("reading go mod download's answer %s: %w", out, err)
	}
	if m.Error != "" || m.Dir == "" {
		return "", "", fmt.Errorf("downloading the k8s.io/kubernetes module of %s: %s", dir, m.Error)
	}
	return m.Dir, m.Version, nil
}

// makeVariable reads `NAME ?= value` (or `NAME = value`) from a Makefile.
func makeVariable(makefile, name string) (string, error) {
	f, err := os.Open(makefile)
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 3 && f[0] == name && (f[1] == "?=" || f[1] == "=" || f[1] == ":=") {
			return f[2], nil
		}
	}
	if err := sc.Err(); err != nil {
		return "", err
	}
	return "", fmt.Errorf("%s sets no %s", makefile, name)
}
