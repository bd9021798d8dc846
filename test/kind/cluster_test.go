package kind

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcsd-io/mcsd/test/lib/dockerd"
	"github.com/mcsd-io/mcsd/test/lib/images"
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

// The README's path on two kind clusters, as test/kind/up.sh takes it:
// both clusters come up on the node image built here with the scripts'
// CNI and routes between their pod networks, mcsd's image is loaded with
// kind load image-archive, the broker is installed with kubectl mcs broker
// install and both clusters join with kubectl mcs join, which configures
// their CoreDNS. Then a service exported in the second cluster answers, by
// its clusterset name, a pod of the first, from one of the second's pods.
func TestKindTwoClustersEndToEnd(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequireCommands(t, "mmdebstrap", "go")
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Minute)
	defer cancel()
	k := newKindEnv(ctx, t)

	began := time.Now()
	mcsd, err := images.MCSD(ctx, "v0.0.0-kind")
	if err != nil {
		t.Fatal(err)
	}
	echo, err := images.Echo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	bin := t.TempDir()
	build := exec.CommandContext(ctx, "go", "build", "-o", filepath.Join(bin, "kubectl-mcs"), "./cmd/kubectl-mcs")
	build.Dir = repoRoot
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building kubectl-mcs: %v\n%s", err, out)
	}
	t.Logf("mcsd image %s, echo image %s and kubectl-mcs in %v", mcsd.Ref, echo.Ref, time.Since(began).Round(time.Millisecond))
	for i, kv := range k.env {
		if p, ok := strings.CutPrefix(kv, "PATH="); ok {
			k.env[i] = "PATH=" + bin + ":" + p
		}
	}
	k.env = append(k.env, "C1=mcsd-kind1", "C2=mcsd-kind2", "IMAGE="+mcsd.Ref, "IMAGE_ARCHIVE="+mcsd.Path)

	// down.sh first, so that a failed up.sh is cleaned up too.
	down, err := filepath.Abs("down.sh")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { k.script(context.Background(), t, `"$1"`, down) })
	up, err := filepath.Abs("up.sh")
	if err != nil {
		t.Fatal(err)
	}
	began = time.Now()
	k.script(ctx, t, `"$1"`, up)
	t.Logf("up.sh: two clusters joined in %v", time.Since(began).Round(time.Millisecond))

	began = time.Now()
	k.script(ctx, t, `kind load image-archive "$1" --name "$C2"
for ctx in "$CTX1" "$CTX2"; do kubectl --context "$ctx" create namespace kind-e2e; done
kubectl --context "$CTX2" -n kind-e2e apply -f - <<YAML
apiVersion: apps/v1
kind: Deployment
metadata: {name: echo}
spec:
  replicas: 1
  selector: {matchLabels: {app: echo}}
  template:
    metadata: {labels: {app: echo}}
    spec:
      containers:
      - name: echo
        image: $2
        imagePullPolicy: Never
        env:
        - {name: CLUSTER, value: "$C2"}
        - name: POD_IPS
          valueFrom: {fieldRef: {fieldPath: status.podIP}}
        - name: POD_NAME
          valueFrom: {fieldRef: {fieldPath: metadata.name}}
---
apiVersion: v1
kind: Service
metadata: {name: echo}
spec:
  selector: {app: echo}
  ports: [{port: 8080}]
---
apiVersion: multicluster.x-k8s.io/v1beta1
kind: ServiceExport
metadata: {name: echo}
YAML
kubectl --context "$CTX1" -n kind-e2e run client --image="$IMAGE" --image-pull-policy=Never --restart=Never --command -- sleep infinity
kubectl --context "$CTX2" -n kind-e2e rollout status deployment echo --timeout=5m
kubectl --context "$CTX1" -n kind-e2e wait --for=condition=Ready pod/client --timeout=5m`, echo.Path, echo.Ref)
	reply := k.script(ctx, t, `answer() {
  kubectl --context "$CTX1" -n kind-e2e exec client -- \
    bash -c 'exec 3<>/dev/tcp/echo.kind-e2e.svc.clusterset.local/8080 && head -n 1 <&3'
}
retry 300 answer`)
	t.Logf("from a pod of the first cluster, echo.kind-e2e.svc.clusterset.local answered %q in %v", reply, time.Since(began).Round(time.Millisecond))
	if f := strings.Fields(reply); len(f) != 3 || f[1] != "mcsd-kind2" || !strings.HasPrefix(f[0], "10.120.") {
		t.Errorf("the reply %q is not from a pod of the second cluster (10.120.0.0/16, mcsd-kind2)", reply)
	}
}
