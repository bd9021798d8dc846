package harness

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/mcsd-io/mcsd/test/lib/repo"
)

// binaries are the programs a cluster runs.
type binaries struct {
	etcd, apiserver, controllerManager string
}

// findBinaries returns the pinned Kubernetes components, building them on
// first use (several minutes) into the version-keyed cache, and Debian's etcd.
func findBinaries() (binaries, error) {
	dir, err := buildTools("test/tools/build.sh", "k8s")
	if err != nil {
		return binaries{}, fmt.Errorf("building the harness's Kubernetes components: %w", err)
	}
	etcd, err := exec.LookPath("etcd")
	if err != nil {
		return binaries{}, fmt.Errorf("etcd is not on PATH (apt-get install etcd-server): %w", err)
	}
	return binaries{
		etcd:              etcd,
		apiserver:         filepath.Join(dir, "kube-apiserver"),
		controllerManager: filepath.Join(dir, "kube-controller-manager"),
	}, nil
}

// nodeBinaries are the programs a real node and its cluster run besides
// the control plane.
type nodeBinaries struct {
	kubelet, scheduler, proxy string
	containerd, ctr           string
	// containerdDir holds containerd's runc shim, which containerd finds
	// on PATH.
	containerdDir string
	// runc is Debian's; the CNI plugins are Debian's too, in cniDir.
	runc, cniDir string
}

// cniDir is where Debian's containernetworking-plugins installs them.
const cniDir = "/usr/lib/cni"

// findNodeBinaries returns kubelet, kube-scheduler and kube-proxy at the
// harness's Kubernetes version, containerd, and Debian's runc and CNI
// plugins, building what is missing on first use (several minutes each)
// into the version-keyed caches.
func findNodeBinaries() (nodeBinaries, error) {
	k8s, err := buildTools("test/tools/build.sh", "k8s", "kubelet", "kube-scheduler", "kube-proxy")
	if err != nil {
		return nodeBinaries{}, fmt.Errorf("building kubelet, kube-scheduler and kube-proxy: %w", err)
	}
	ctrd, err := buildTools("test/tools/containerd/build.sh", "containerd")
	if err != nil {
		return nodeBinaries{}, fmt.Errorf("building containerd: %w", err)
	}
	b := nodeBinaries{
		kubelet:       filepath.Join(k8s, "kubelet"),
		scheduler:     filepath.Join(k8s, "kube-scheduler"),
		proxy:         filepath.Join(k8s, "kube-proxy"),
		containerd:    filepath.Join(ctrd, "containerd"),
		ctr:           filepath.Join(ctrd, "ctr"),
		containerdDir: ctrd,
		cniDir:        cniDir,
	}
	if b.runc, err = exec.LookPath("runc"); err != nil {
		return nodeBinaries{}, fmt.Errorf("runc is not on PATH (apt-get install runc): %w", err)
	}
	for _, p := range []string{"ptp", "host-local", "loopback"} {
		if _, err := os.Stat(filepath.Join(cniDir, p)); err != nil {
			return nodeBinaries{}, fmt.Errorf("the CNI plugin %s is not in %s (apt-get install containernetworking-plugins): %w", p, cniDir, err)
		}
	}
	for _, cmd := range []string{"nsenter", "nft", "mount"} {
		if _, err := exec.LookPath(cmd); err != nil {
			return nodeBinaries{}, fmt.Errorf("%s is not on PATH: %w", cmd, err)
		}
	}
	return b, nil
}

// KubernetesTool returns the path of a command of k8s.io/kubernetes at the
// harness's version (kubectl, say), building it on first use into the
// version-keyed cache.
func KubernetesTool(name string) (string, error) {
	dir, err := buildTools("test/tools/build.sh", "k8s", name)
	if err != nil {
		return "", fmt.Errorf("building %s: %w", name, err)
	}
	return filepath.Join(dir, name), nil
}

// buildTools runs one of the pinned-tool build scripts with the cache
// directory sub of $MCSD_CACHE (default .cache in the repository) and the
// given components, and returns the directory it prints.
func buildTools(script, sub string, components ...string) (string, error) {
	root, err := repo.Root()
	if err != nil {
		return "", err
	}
	cache, err := repo.Cache()
	if err != nil {
		return "", err
	}
	cmd := exec.Command("bash", append([]string{filepath.Join(root, script), filepath.Join(cache, sub)}, components...)...)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(out)), nil
}
