package harness

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

const modulePath = "github.com/mcsd-io/mcsd"

// repoRoot finds the module root from the working directory, which is a
// package directory under go test and anywhere inside the tree for the CLI.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && bytes.HasPrefix(data, []byte("module "+modulePath+"\n")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("not inside the %s module; run from the repository", modulePath)
		}
		dir = parent
	}
}

// binaries are the programs a cluster runs.
type binaries struct {
	etcd, apiserver, controllerManager string
}

// findBinaries returns the pinned Kubernetes components, building them on
// first use (several minutes) into the version-keyed cache, and Debian's etcd.
func findBinaries() (binaries, error) {
	root, err := repoRoot()
	if err != nil {
		return binaries{}, err
	}
	cache := os.Getenv("MCSD_CACHE")
	if cache == "" {
		cache = filepath.Join(root, ".cache")
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
