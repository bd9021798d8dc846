package oci

import (
	"cmp"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
)

// DefaultPath is the PATH of Debian's images, and so of an image built FROM
// debian: programs that run others by name (knftables runs `nft`) find
// them through it.
const DefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// Config is how a container of the image runs: the runtime part of an OCI
// image config (what a Dockerfile's ENTRYPOINT, CMD, USER, ENV, WORKDIR and
// LABEL say).
type Config struct {
	// OS and Architecture of the binaries inside; containerd refuses to
	// unpack an image without them. Default: linux and runtime.GOARCH.
	OS, Architecture string
	Entrypoint       []string
	Cmd              []string
	// User is "uid:gid" (or a name the image's /etc/passwd knows); empty
	// is root.
	User string
	// Env is KEY=value; an image with no PATH gets DefaultPath.
	Env        []string
	WorkingDir string
	Labels     map[string]string
}

// Layer is one layer of an image and the line the image's history keeps
// for it.
type Layer struct {
	v1.Layer
	// CreatedBy says how the layer was made, like a Dockerfile's history
	// (`COPY mcsd /usr/local/bin/mcsd`).
	CreatedBy string
}

// Build stacks layers, first at the bottom, under cfg. The image carries no
// creation time, so the same inputs give the same image digest.
func Build(cfg Config, layers ...Layer) (v1.Image, error) {
	img := empty.Image
	for i, l := range layers {
		if l.Layer == nil {
			return nil, fmt.Errorf("layer %d (%s) is nil", i, l.CreatedBy)
		}
		var err error
		img, err = mutate.Append(img, mutate.Addendum{
			Layer:   l.Layer,
			History: v1.History{CreatedBy: l.CreatedBy},
		})
		if err != nil {
			return nil, fmt.Errorf("adding layer %d (%s): %w", i, l.CreatedBy, err)
		}
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("reading the image config: %w", err)
	}
	cf = cf.DeepCopy()
	cf.OS = cmp.Or(cfg.OS, "linux")
	cf.Architecture = cmp.Or(cfg.Architecture, runtime.GOARCH)
	env := slices.Clone(cfg.Env)
	if !slices.ContainsFunc(env, func(kv string) bool { return strings.HasPrefix(kv, "PATH=") }) {
		env = append([]string{"PATH=" + DefaultPath}, env...)
	}
	cf.Config = v1.Config{
		Entrypoint: slices.Clone(cfg.Entrypoint),
		Cmd:        slices.Clone(cfg.Cmd),
		User:       cfg.User,
		Env:        env,
		WorkingDir: cfg.WorkingDir,
		Labels:     maps.Clone(cfg.Labels),
	}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, fmt.Errorf("setting the image config: %w", err)
	}
	return img, nil
}
