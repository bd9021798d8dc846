package harness

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/mcsd-io/mcsd/test/repo"
)

// binaries are the programs a cluster runs.
type binaries struct {
	etcd, apiserver, controllerManager string
}

// findBinaries returns the pinned Kubernetes components, building them on
// first use (several minutes) into the version-keyed cache, and Debian's etcd.
func findBinaries() (binaries, error) {
	root, err := repo.Root()
	if err != nil {
		return binaries{}, err
	}
	cache, err := repo.Cache()
	if err != nil {
		return binaries{}, err
	}
	cmd := exec.Command("bash", filepath.Join(root, "test/tools/build.sh"), filepath.Join(cache, "k8s"))
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return binaries{}, fmt.Errorf("building the harness's Kubernetes components: %w", err)
	}
	dir := strings.TrimSpace(string(out))
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
