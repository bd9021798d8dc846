// Package kindnode builds a kind node image without a registry or Docker,
// as an archive that `docker load` takes, cached by content under
// $MCSD_CACHE/kind-node. It only builds the image; running kind is
// test/kind's business.
//
// `kind build node-image` cannot work here: it starts from kindest/base,
// and it pulls kind's CNI and storage images into the node's containerd
// from their registries, neither of which can be reached. So the image is
// assembled as kind's base image Dockerfile (images/base of the kind
// module test/tools/kind pins) and its node image build describe it:
//
//   - a Debian root filesystem (Base): systemd, the packages kind's base
//     installs that bookworm has, and runc and the CNI plugins from
//     Debian;
//   - kind's base files from the kind module (entrypoint, systemd units,
//     containerd's config), containerd 2.x built from its module as the
//     harness's real nodes run it (test/tools/containerd), crictl from
//     cri-tools (test/tools/crictl), and kubeadm, kubelet and kubectl from
//     k8s.io/kubernetes (test/tools), with containerd's base runtime spec
//     made as kind makes it;
//   - the services kind enables (containerd, kubelet, undo-mount-hacks)
//     and masks (systemd-binfmt), as symbolic links;
//   - the images kubeadm runs, built here (preload.go), imported into the
//     node's containerd before kubelet starts.
package kindnode

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"github.com/mcsd-io/mcsd/internal/image/buildcache"
	"github.com/mcsd-io/mcsd/internal/image/debroot"
	"github.com/mcsd-io/mcsd/internal/image/oci"
	"github.com/mcsd-io/mcsd/test/lib/repo"
)

// imageFormat changes whenever what Build assembles changes for the same
// inputs, so that cached images of the old form are not taken.
const imageFormat = "3"

// Repository names the images built here: under localhost/, so that a
// node image that is not loaded fails at once instead of being pulled.
const Repository = "localhost/kind-node"

// Base is the node's Debian root filesystem: the packages of kind's base
// image that a node of these tests uses (without the network storage and
// storage e2e ones), with runc and the CNI plugins from Debian instead of
// built from source.
var Base = debroot.Spec{
	Suite: "bookworm",
	Packages: []string{
		"systemd", "systemd-sysv", "dbus",
		"conntrack", "iptables", "nftables", "iproute2", "ethtool", "util-linux", "mount", "kmod",
		"libseccomp2", "pigz", "bash", "ca-certificates", "procps",
		// kind's mount-product-files hook, which runs for every pod
		// container, reads the spec with jq.
		"jq",
		"runc", "containernetworking-plugins",
	},
	Check: [][]string{{"systemctl", "--version"}, {"runc", "--version"}, {"iptables", "--version"}},
}

// Image is a built node image archive.
type Image struct {
	// Ref is what the archive holds the image under; kind create
	// cluster --image takes it once the archive is loaded.
	Ref string
	// Path is the docker-archive, for `docker load -i`.
	Path string
}

// Build returns the node image, building it on first use: mmdebstrap for
// the root filesystem (a minute or two, once), the tools (test/tools), and
// the image itself.
func Build(ctx context.Context, log io.Writer) (Image, error) {
	cache, err := repo.Cache()
	if err != nil {
		return Image{}, err
	}
	work, err := os.MkdirTemp("", "kind-node-")
	if err != nil {
		return Image{}, err
	}
	defer os.RemoveAll(work)
	inputs, err := gatherInputs(ctx, cache, work, log)
	if err != nil {
		return Image{}, err
	}
	key, err := inputs.key()
	if err != nil {
		return Image{}, err
	}
	ref := Repository + ":" + inputs.kubernetesVersion + "-" + key
	path, err := buildcache.Get(filepath.Join(cache, "kind-node"), key+".tar", func(tmp string) error {
		return assemble(tmp, ref, inputs)
	})
	if err != nil {
		return Image{}, err
	}
	return Image{Ref: ref, Path: path}, nil
}

// file is one file of the node's own layer.
type file struct {
	path   string      // in the image
	source string      // on disk; empty for a symbolic link
	link   string      // the link's target
	mode   fs.FileMode // of a regular file
}

// inputs is everything the image is made of.
type inputs struct {
	baseLayer         string
	files             []file
	kubernetesVersion string
}

// key is the first 16 hex digits of a hash of every input's content.
func (in inputs) key() (string, error) {
	h := sha256.New()
	fmt.Fprintf(h, "format %s\nbase %s\n", imageFormat, filepath.Base(in.baseLayer))
	for _, f := range in.files {
		content := ""
		if f.source != "" {
			var err error
			if content, err = hashFiles(f.source); err != nil {
				return "", err
			}
		}
		fmt.Fprintf(h, "%s %o %s %s\n", f.path, f.mode, f.link, content)
	}
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}

// hashFiles is the first 16 hex digits of a hash of the files' contents,
// one after the other.
func hashFiles(paths ...string) (string, error) {
	h := sha256.New()
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			return "", err
		}
		_, err = io.Copy(h, f)
		f.Close()
		if err != nil {
			return "", fmt.Errorf("hashing %s: %w", p, err)
		}
	}
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}

// gatherInputs builds what is not built yet and lists the node's files;
// the files made for the image go to work.
func gatherInputs(ctx context.Context, cache, work string, log io.Writer) (inputs, error) {
	root, err := repo.Root()
	if err != nil {
		return inputs{}, err
	}
	var in inputs
	if in.baseLayer, err = debroot.Layer(ctx, filepath.Join(cache, "debroot"), Base, log); err != nil {
		return inputs{}, err
	}
	k8s, err := buildTool(ctx, root, "test/tools/build.sh", filepath.Join(cache, "k8s"), "kubeadm", "kubelet", "kubectl")
	if err != nil {
		return inputs{}, err
	}
	in.kubernetesVersion = filepath.Base(k8s)
	containerd, err := buildTool(ctx, root, "test/tools/containerd/build.sh", filepath.Join(cache, "containerd"))
	if err != nil {
		return inputs{}, err
	}
	crictl, err := buildTool(ctx, root, "test/tools/crictl/build.sh", filepath.Join(cache, "crictl"))
	if err != nil {
		return inputs{}, err
	}
	etcd, err := buildTool(ctx, root, "test/tools/etcd/build.sh", filepath.Join(cache, "etcd"))
	if err != nil {
		return inputs{}, err
	}
	kindBase, err := kindBaseFiles(ctx, root)
	if err != nil {
		return inputs{}, err
	}
	criBase, err := writeCRIBaseSpec(ctx, filepath.Join(containerd, "ctr"), filepath.Join(work, "cri-base.json"))
	if err != nil {
		return inputs{}, err
	}
	version := filepath.Join(work, "version")
	if err := os.WriteFile(version, []byte(in.kubernetesVersion), 0o644); err != nil {
		return inputs{}, err
	}

	// The kernel's messages are the machine's, not the node's.
	journald := filepath.Join(work, "journald.conf")
	if err := os.WriteFile(journald, []byte("[Journal]\nReadKMsg=no\n"), 0o644); err != nil {
		return inputs{}, err
	}
	in.files = append(in.files, kindBase...)
	for _, b := range []string{"kubeadm", "kubelet", "kubectl"} {
		// kind's kubelet unit runs /usr/bin/kubelet.
		in.files = append(in.files, file{path: "/usr/bin/" + b, source: filepath.Join(k8s, b), mode: 0o755})
	}
	for _, b := range []string{"containerd", "containerd-shim-runc-v2", "ctr"} {
		in.files = append(in.files, file{path: "/usr/local/bin/" + b, source: filepath.Join(containerd, b), mode: 0o755})
	}
	in.files = append(in.files,
		file{path: "/usr/local/bin/crictl", source: filepath.Join(crictl, "crictl"), mode: 0o755},
		file{path: "/etc/containerd/cri-base.json", source: criBase, mode: 0o644},
		file{path: "/kind/version", source: version, mode: 0o644},
		file{path: "/etc/systemd/journald.conf.d/kind.conf", source: journald, mode: 0o644},
	)
	in.files = append(in.files, serviceLinks()...)
	containerdConfig := ""
	for i, f := range in.files {
		if f.path == "/etc/containerd/config.toml" {
			containerdConfig = filepath.Join(work, "config.toml")
			if err := restrictOOMScoreAdj(f.source, containerdConfig); err != nil {
				return inputs{}, err
			}
			in.files[i].source = containerdConfig
		}
	}
	if containerdConfig == "" {
		return inputs{}, fmt.Errorf("kind's base files have no /etc/containerd/config.toml")
	}
	preload, err := preloadImages(ctx, cache, work, k8s, etcd, containerdConfig)
	if err != nil {
		return inputs{}, err
	}
	in.files = append(in.files, preload...)
	slices.SortFunc(in.files, func(a, b file) int { return strings.Compare(a.path, b.path) })
	return in, nil
}

// buildTool runs one of test/tools' build scripts and returns the directory
// it prints.
func buildTool(ctx context.Context, root, script, cache string, components ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "bash", append([]string{filepath.Join(root, script), cache}, components...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("%s: %w\n%s", script, err, stderr.String())
	}
	return strings.TrimSpace(string(out)), nil
}

// assemble writes the image of in to tmp as a docker-archive under ref.
func assemble(tmp, ref string, in inputs) error {
	base, err := oci.TarLayer("mmdebstrap "+Base.Suite+" (minbase) + "+strings.Join(Base.Packages, " "), in.baseLayer)
	if err != nil {
		return err
	}
	dir := tmp + ".stage"
	defer os.RemoveAll(dir)
	if err := stage(dir, in.files); err != nil {
		return err
	}
	node, err := oci.DirLayer("kind base files, containerd, crictl, kubeadm, kubelet, kubectl, preloaded images", dir, "/")
	if err != nil {
		return err
	}
	img, err := oci.Build(oci.Config{
		// What kind's node images run; kind passes the same when it
		// creates a node.
		Entrypoint: []string{"/usr/local/bin/entrypoint", "/sbin/init"},
		// systemd's container interface.
		Env: []string{"container=docker"},
	}, base, node)
	if err != nil {
		return err
	}
	return oci.Write(tmp, ref, img)
}

// restrictOOMScoreAdj writes kind's containerd config src to dst with
// restrict_oom_score_adj on, as kind's entrypoint sets it for rootless
// nodes. A node whose bounding set lacks CAP_SYS_RESOURCE (under
// boundedrunc) cannot lower a process's oom_score_adj, and runc fails to
// start every pod that asks for it; restricted, containerd never asks for
// less than its own. Where containerd runs at -999, as kind's unit starts
// it, nothing changes.
func restrictOOMScoreAdj(src, dst string) error {
	data, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	const off, on = "restrict_oom_score_adj = false", "restrict_oom_score_adj = true"
	if !strings.Contains(string(data), off) {
		return fmt.Errorf("kind's containerd config %s no longer says %q", src, off)
	}
	return os.WriteFile(dst, []byte(strings.Replace(string(data), off, on, 1)), 0o644)
}
