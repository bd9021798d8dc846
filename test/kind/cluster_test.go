package kind

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcsd-io/mcsd/test/lib/dockerd"
	"github.com/mcsd-io/mcsd/test/lib/kindnode"
	"github.com/mcsd-io/mcsd/test/lib/repo"
	"github.com/mcsd-io/mcsd/test/lib/testenv"
)

// A kind cluster made by the shipped scripts' create_cluster and
// install_cni comes up Ready on the node image built here: kubelet runs on
// the machine's cgroups (v1 included) and the pod network is the scripts'
// ptp CNI, so a pod gets an address from the node's pod CIDR and runs.
func TestKindClusterComesUpReady(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequireCommands(t, "mmdebstrap", "go")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	k := newKindEnv(ctx, t)

	const name = "mcsd-kind-test"
	began := time.Now()
	k.script(ctx, t, `create_cluster "$1" 10.130.0.0/16 10.131.0.0/16 && install_cni "$1"`, name)
	t.Logf("cluster %s created and Ready in %v", name, time.Since(began).Round(time.Millisecond))
	t.Cleanup(func() { k.script(context.Background(), t, `kind delete cluster --name "$1"`, name) })

	began = time.Now()
	k.script(ctx, t, `kubectl --context "kind-$1" run probe --image=registry.k8s.io/pause:3.10 --restart=Never &&
kubectl --context "kind-$1" wait --for=condition=Ready pod/probe --timeout=5m`, name)
	ip := k.script(ctx, t, `kubectl --context "kind-$1" get pod probe -o jsonpath='{.status.podIP}'`, name)
	t.Logf("a pod ran in %v with address %s", time.Since(began).Round(time.Millisecond), ip)
	if !strings.HasPrefix(ip, "10.130.") {
		t.Errorf("the pod's address %q is not from the cluster's pod range 10.130.0.0/16", ip)
	}
}

// kindEnv is what the kind scripts run with: a Docker engine with the node
// image loaded, and kind and kubectl on PATH.
type kindEnv struct {
	engine *dockerd.Engine
	env    []string
}

func newKindEnv(ctx context.Context, t *testing.T) *kindEnv {
	t.Helper()
	began := time.Now()
	img, err := kindnode.Build(ctx, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("node image %s in %v", img.Ref, time.Since(began).Round(time.Millisecond))
	kind, err := repo.Tool(ctx, "kind", "kind")
	if err != nil {
		t.Fatal(err)
	}
	e := dockerd.ForTest(ctx, t)
	began = time.Now()
	if _, err := e.Docker(ctx, "load", "-i", img.Path); err != nil {
		t.Fatal(err)
	}
	t.Logf("node image loaded in %v", time.Since(began).Round(time.Millisecond))
	work := t.TempDir()
	env := []string{
		"PATH=" + filepath.Dir(kind) + ":" + kubectl(t) + ":" + os.Getenv("PATH"),
		"KUBECONFIG=" + filepath.Join(work, "kubeconfig"),
		"KIND_NODE_IMAGE=" + img.Ref,
		"KIND_WORKERS=0",
	}
	for _, kv := range e.Env() {
		if !strings.HasPrefix(kv, "PATH=") && !strings.HasPrefix(kv, "KUBECONFIG=") {
			env = append(env, kv)
		}
	}
	return &kindEnv{engine: e, env: env}
}

// script runs a bash script with test/kind/lib.sh sourced, in the
// engine's network namespace, and returns its standard output; it fails
// the test when the script fails.
func (k *kindEnv) script(ctx context.Context, t *testing.T, body string, args ...string) string {
	t.Helper()
	lib, err := filepath.Abs("lib.sh")
	if err != nil {
		t.Fatal(err)
	}
	cmd := k.engine.Command(ctx, "bash", append([]string{"-c", "set -euo pipefail; source " + lib + "\n" + body, "script"}, args...)...)
	cmd.Env = k.env
	var stdout strings.Builder
	cmd.Stdout = &stdout
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		k.diagnose(t)
		t.Fatalf("%s: %v", body, err)
	}
	return strings.TrimSpace(stdout.String())
}

// diagnose logs what a failed step leaves to read: each node's containers
// and the ends of their logs, and its kubelet's and containerd's.
func (k *kindEnv) diagnose(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, _ := k.engine.Docker(ctx, "ps", "-a", "--format", "{{.Names}}")
	for _, node := range strings.Fields(out) {
		logs, _ := k.engine.Docker(ctx, "exec", node, "sh", "-c",
			`crictl ps -a; for c in $(crictl ps -a -q); do echo "--- $(crictl inspect -o go-template --template '{{.status.metadata.name}}' $c)"; crictl logs --tail 15 $c 2>&1; done; journalctl --no-pager -n 30 -u kubelet -u containerd`)
		t.Logf("node %s:\n%s", node, logs)
	}
}
