package kind

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcsd-io/mcsd/test/lib/conformance"
	"github.com/mcsd-io/mcsd/test/lib/dockerd"
	"github.com/mcsd-io/mcsd/test/lib/images"
	"github.com/mcsd-io/mcsd/test/lib/kindnode"
	"github.com/mcsd-io/mcsd/test/lib/repo"
	"github.com/mcsd-io/mcsd/test/lib/testenv"
)

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
	if os.Getenv("MCSD_KIND_REQUIRED") != "" {
		// make test-kind: a missing engine is an error, not a skip.
		if _, err := dockerd.Machine(ctx); err != nil {
			if _, lerr := exec.LookPath("dockerd"); lerr != nil {
				t.Fatalf("no Docker engine answers (%v), and no dockerd to start a private one (apt-get install docker.io)", err)
			}
		}
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

// The README's path on two kind clusters, as the shipped scripts take it:
// up.sh brings both clusters up on the node image built here with its CNI
// and routes between their pod networks, loads mcsd's image with kind load
// image-archive, installs the broker with kubectl mcs broker install and
// joins both clusters with kubectl mcs join, which configures their
// CoreDNS. Then e2e.sh's smoke test (a service exported in the second
// cluster answers, by its clusterset name, a pod of the first) and every
// spec of the mcs-api conformance suite run against the two clusters;
// down.sh removes them.
func TestKindTwoClustersEndToEnd(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequireCommands(t, "mmdebstrap", "go")
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Minute)
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
	k.env = append(k.env, "C1="+kindCluster1, "C2="+kindCluster2, "IMAGE="+mcsd.Ref, "IMAGE_ARCHIVE="+mcsd.Path,
		"ECHO_IMAGE="+echo.Ref, "ECHO_ARCHIVE="+echo.Path)

	// down.sh first, so that a failed up.sh is cleaned up too.
	t.Cleanup(func() { k.script(context.Background(), t, `"$1"`, scriptPath(t, "down.sh")) })
	began = time.Now()
	k.script(ctx, t, `"$1"`, scriptPath(t, "up.sh"))
	t.Logf("figure: up.sh brought two clusters up and joined them in %v", time.Since(began).Round(time.Millisecond))

	t.Run("e2e.sh smoke test", func(t *testing.T) {
		began := time.Now()
		k.script(ctx, t, `SKIP_CONFORMANCE=1 "$1"`, scriptPath(t, "e2e.sh"))
		t.Logf("figure: e2e.sh's smoke test passed in %v", time.Since(began).Round(time.Millisecond))
	})
	t.Run("conformance", func(t *testing.T) {
		k.script(ctx, t, `kind load image-archive "$1" --name "$C1"`, echo.Path)
		p := newKindPlatform(ctx, t, k, echo.Ref)
		// Pods start in seconds on kind's nodes, not at once as the
		// harness's: every wait gets more room than the upstream 20 s.
		// The cluster DNS is CoreDNS with join's snippet, whose cache may
		// answer NXDOMAIN for a few seconds after a name first resolves.
		world := conformance.NewWorld(p, conformance.Options{ResolveVia: conformance.ClusterDNS, Await: 2 * time.Minute, Settle: 5 * time.Second})
		began := time.Now()
		conformance.Run(t, world, conformance.Specs)
		t.Logf("figure: %d conformance specs on kind in %v", len(conformance.Specs), time.Since(began).Round(10*time.Millisecond))
	})
}

// scriptPath is the absolute path of a script of test/kind.
func scriptPath(t *testing.T, name string) string {
	t.Helper()
	p, err := filepath.Abs(name)
	if err != nil {
		t.Fatal(err)
	}
	return p
}
