package kindnode

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/mcsd-io/mcsd/internal/image/buildcache"
	"github.com/mcsd-io/mcsd/internal/image/mcsdimage"
	"github.com/mcsd-io/mcsd/internal/image/oci"
	"github.com/mcsd-io/mcsd/test/lib/images"
)

// preloadDir is where the node image keeps the archives of the images its
// containerd is given before kubelet starts, and preloadUnit the service
// that imports them. kind's own node images carry them in containerd's
// store already; importing at boot needs no containerd at build time, and
// is what `kind load image-archive` does too.
const (
	preloadDir  = "/kind/images"
	preloadUnit = "kind-preload-images.service"
)

var preloadService = `[Unit]
Description=Import the node image's preloaded images into containerd
After=containerd.service
Requires=containerd.service
Before=kubelet.service

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/bin/sh -ec 'for f in ` + preloadDir + `/*.tar; do /usr/local/bin/ctr --namespace k8s.io images import --label io.cri-containerd.pinned=pinned "$f"; done'

[Install]
WantedBy=multi-user.target
`

// preloadImages builds the images kubeadm runs at kubernetesVersion (as
// `kubeadm config images list` names them) and the sandbox image of kind's
// containerd config, and returns the node's files that carry them: their
// archives, the import service and its link.
//
//   - kube-apiserver, kube-controller-manager, kube-scheduler and
//     kube-proxy are the binaries of test/tools on mcsd's Debian base
//     (glibc, and iptables and nft for kube-proxy), at /usr/local/bin,
//     where kubeadm's manifests find them by name;
//   - etcd is the release test/tools/etcd pins, on the same base;
//   - CoreDNS and pause are the real-node images (test/lib/images) under
//     kubeadm's references.
func preloadImages(ctx context.Context, cache, work, k8s, etcd, containerdConfig string) ([]file, error) {
	refs, err := kubeadmImages(ctx, filepath.Join(k8s, "kubeadm"), filepath.Base(k8s))
	if err != nil {
		return nil, err
	}
	sandbox, err := sandboxImage(containerdConfig)
	if err != nil {
		return nil, err
	}
	refs = append(refs, sandbox)
	baseLayer, err := mcsdimage.BaseLayer(ctx, mcsdimage.Options{Cache: cache})
	if err != nil {
		return nil, err
	}
	var files []file
	for i, ref := range refs {
		archive, err := preloadImage(ctx, cache, baseLayer, k8s, etcd, ref)
		if err != nil {
			return nil, fmt.Errorf("the node's image %s: %w", ref, err)
		}
		files = append(files, file{path: fmt.Sprintf("%s/%02d-%s.tar", preloadDir, i, repositoryName(ref)), source: archive, mode: 0o644})
	}
	unit := filepath.Join(work, preloadUnit)
	if err := os.WriteFile(unit, []byte(preloadService), 0o644); err != nil {
		return nil, err
	}
	return append(files,
		file{path: "/etc/systemd/system/" + preloadUnit, source: unit, mode: 0o644},
		file{path: "/etc/systemd/system/multi-user.target.wants/" + preloadUnit, link: "/etc/systemd/system/" + preloadUnit},
	), nil
}

// preloadImage returns the archive of one image under ref, from the cache.
func preloadImage(ctx context.Context, cache, baseLayer, k8s, etcd, ref string) (string, error) {
	name := repositoryName(ref)
	switch name {
	case "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kube-proxy":
		return binaryImage(cache, baseLayer, filepath.Join(k8s, name), ref)
	case "etcd":
		return binaryImage(cache, baseLayer, filepath.Join(etcd, "etcd"), ref)
	case "coredns":
		img, err := images.CoreDNS(ctx)
		if err != nil {
			return "", err
		}
		return retagged(cache, img.Path, ref)
	case "pause":
		img, err := images.Pause(ctx)
		if err != nil {
			return "", err
		}
		return retagged(cache, img.Path, ref)
	}
	return "", fmt.Errorf("no image is built here for %s", ref)
}

// binaryImage is binary at /usr/local/bin on the Debian base layer.
func binaryImage(cache, baseLayer, binary, ref string) (string, error) {
	hash, err := hashFiles(binary)
	if err != nil {
		return "", err
	}
	name := fmt.Sprintf("%s-%s-%s.tar", repositoryName(ref), hash, strings.TrimSuffix(filepath.Base(baseLayer), ".tar.gz"))
	return buildcache.Get(filepath.Join(cache, "kind-node", "images"), name, func(tmp string) error {
		base, err := oci.TarLayer("mcsd's Debian base", baseLayer)
		if err != nil {
			return err
		}
		bin, err := oci.FilesLayer("COPY "+path.Base(binary)+" /usr/local/bin/", oci.File{Path: "/usr/local/bin/" + filepath.Base(binary), Source: binary, Mode: 0o755})
		if err != nil {
			return err
		}
		img, err := oci.Build(oci.Config{Entrypoint: []string{"/usr/local/bin/" + filepath.Base(binary)}}, base, bin)
		if err != nil {
			return err
		}
		return oci.Write(tmp, ref, img)
	})
}

// retagged is the image of the archive at src under ref.
func retagged(cache, src, ref string) (string, error) {
	hash, err := hashFiles(src)
	if err != nil {
		return "", err
	}
	name := fmt.Sprintf("%s-%s-%s.tar", repositoryName(ref), tagOf(ref), hash)
	return buildcache.Get(filepath.Join(cache, "kind-node", "images"), name, func(tmp string) error {
		img, _, err := oci.Read(src)
		if err != nil {
			return err
		}
		return oci.Write(tmp, ref, img)
	})
}

// kubeadmImages lists the images kubeadm runs at version.
func kubeadmImages(ctx context.Context, kubeadm, version string) ([]string, error) {
	out, err := exec.CommandContext(ctx, kubeadm, "config", "images", "list", "--kubernetes-version", version).Output()
	if err != nil {
		return nil, fmt.Errorf("kubeadm config images list: %w", err)
	}
	refs := strings.Fields(string(out))
	if len(refs) == 0 {
		return nil, fmt.Errorf("kubeadm config images list named no image")
	}
	return refs, nil
}

var sandboxImageLine = regexp.MustCompile(`(?m)^\s*sandbox_image\s*=\s*"([^"]+)"`)

// sandboxImage is the sandbox_image of a containerd config file.
func sandboxImage(config string) (string, error) {
	data, err := os.ReadFile(config)
	if err != nil {
		return "", err
	}
	m := sandboxImageLine.FindSubmatch(data)
	if m == nil {
		return "", fmt.Errorf("no sandbox_image in %s", config)
	}
	return string(m[1]), nil
}

// repositoryName is the last element of a reference's repository:
// kube-proxy of registry.k8s.io/kube-proxy:v1.36.3.
func repositoryName(ref string) string {
	repo := ref
	if i := strings.LastIndex(repo, ":"); i > strings.LastIndex(repo, "/") {
		repo = repo[:i]
	}
	return path.Base(repo)
}

func tagOf(ref string) string {
	if i := strings.LastIndex(ref, ":"); i > strings.LastIndex(ref, "/") {
		return ref[i+1:]
	}
	return "latest"
}
