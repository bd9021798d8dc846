// Package realnode tests what a user installs, on real kubelets: the mcsd
// image, the node agents' DaemonSet and the controller's Deployment with
// their identities, admission policy, probes and in-cluster configuration,
// leader election between the controller's pods, the mcsd-dns Service and
// the CoreDNS snippet, installed as the README says (kubectl mcs broker
// install, then kubectl mcs join per member, which installs the chart and
// waits until CoreDNS answers; Helm's path with join --install=false in
// another namespace is tested too), on two member clusters of two real
// nodes each (test/lib/harness RealNodes: kubelet, containerd and
// kube-proxy per node). Pods resolve through the kubelet's clusterDNS, a
// CoreDNS Deployment carrying the shipped snippet.
//
// Every test shares one clusterset, started by the first test that runs and
// torn down when the package's tests end; TestRealNodes runs them in order,
// and its uninstall, last, removes what the install put in. TestDocs, the
// documentation's commands, starts a clusterset of its own without mcsd.
package realnode

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcsd-io/mcsd/test/lib/conformance"
	"github.com/mcsd-io/mcsd/test/lib/harness"
	"github.com/mcsd-io/mcsd/test/lib/images"
	"github.com/mcsd-io/mcsd/test/lib/repo"
	"github.com/mcsd-io/mcsd/test/lib/testenv"
)

// world is the clusterset every test of the package runs in.
type world struct {
	cs *harness.ClusterSet
	// dir holds the kubectl plugin, the overlays and other files the
	// tests write, inside the run's state directory.
	dir  string
	root string
	// kubectlPath is the pinned kubectl; binDir holds kubectl-mcs, so
	// `kubectl mcs` finds it on PATH.
	kubectlPath, binDir string
	// kubeconfig lists every cluster's kubeconfig as the operator's
	// machine reaches it (the gateway); contexts are named after the
	// clusters (broker, cluster1, cluster2).
	kubeconfig string

	// mcsd holds the two image tags of mcsd: the install's, and the one a
	// rolling update moves to.
	mcsd          [2]images.Image
	coredns, echo images.Image

	members []*member
	// uninstalled is set once the uninstall has run: nothing is left to
	// test.
	uninstalled bool
}

// member is one member cluster as installed.
type member struct {
	*harness.Cluster
	// id is the cluster ID mcsd resolved (the ClusterProperty).
	id string
	// clients are a client pod on each of the cluster's nodes.
	clients []*client
}

var (
	worldOnce sync.Once
	shared    *world
	sharedErr error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if shared != nil && shared.cs != nil {
		shared.cs.Close()
	}
	os.Exit(code)
}

// setup returns the installed clusterset, starting it on first use (t
// receives the install's figures).
func setup(t *testing.T) *world {
	t.Helper()
	requireRealNodes(t)
	worldOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
		defer cancel()
		shared, sharedErr = install(ctx, t)
	})
	if sharedErr != nil {
		t.Fatalf("installing mcsd on real nodes: %v", sharedErr)
	}
	if shared.uninstalled {
		t.Fatal("the uninstall already removed mcsd: it must run last")
	}
	return shared
}

// requireRealNodes skips the test where real nodes cannot run.
func requireRealNodes(t *testing.T) {
	t.Helper()
	testenv.RequireRoot(t)
	testenv.RequireCommands(t, "ip", "etcd", "nft", "iptables", "nsenter", "unshare", "runc", "gcc", "mmdebstrap")
}

// install starts the clusterset and installs mcsd in it as the README
// says, logging how long each step took.
func install(ctx context.Context, t *testing.T) (*world, error) {
	began := time.Now()
	w, err := start(ctx, t)
	if err != nil {
		return w, err
	}
	if err := w.installBroker(ctx); err != nil {
		return w, err
	}
	for _, m := range w.members {
		step := time.Now()
		if err := w.joinWatched(ctx, t, m, w.mcsd[0], w.joinArgs(m, w.mcsd[0])...); err != nil {
			return w, err
		}
		t.Logf("figure: %s: every mcsd pod Ready %v after kubectl mcs join began", m.Name, time.Since(step).Round(10*time.Millisecond))
	}
	for _, m := range w.members {
		if m.id, err = conformance.RecordedClusterID(ctx, m.Dynamic, m.Name); err != nil {
			return w, err
		}
		if err := w.startClients(ctx, m); err != nil {
			return w, err
		}
	}
	for _, m := range w.members {
		if err := awaitClustersetZone(ctx, t, m); err != nil {
			return w, err
		}
	}
	t.Logf("figure: installed and ready %v after start", time.Since(began).Round(10*time.Millisecond))
	return w, nil
}

// start starts a clusterset of two members of two real nodes each, with
// the images imported into every node, kubectl and kubectl-mcs built, and
// each member's own CoreDNS: clusters without mcsd.
func start(ctx context.Context, t *testing.T) (*world, error) {
	began := time.Now()
	root, err := repo.Root()
	if err != nil {
		return nil, err
	}
	w := &world{root: root}
	// Images and the pinned kubectl build while the clusters start.
	var wg sync.WaitGroup
	var imgErr, toolErr error
	wg.Add(2)
	go func() {
		defer wg.Done()
		imgErr = w.buildImages(ctx)
	}()
	go func() {
		defer wg.Done()
		w.kubectlPath, toolErr = harness.KubernetesTool("kubectl")
	}()
	w.cs, err = harness.Up(ctx, harness.Options{Clusters: 2, RealNodes: true, Nodes: 2})
	wg.Wait()
	if err != nil {
		return w, fmt.Errorf("starting two clusters of two real nodes: %w", err)
	}
	if imgErr != nil || toolErr != nil {
		return w, fmt.Errorf("images: %v; kubectl: %v", imgErr, toolErr)
	}
	// What the tests write lives in the run's state directory, which the
	// next start removes should this test be killed.
	w.dir = filepath.Join(w.cs.Dir, "realnode")
	w.binDir = filepath.Join(w.dir, "bin")
	if err := buildPlugin(ctx, w.root, w.binDir); err != nil {
		return w, err
	}
	t.Logf("figure: broker and 2 clusters of 2 real nodes each up, images and tools built, in %v (state in %s)", time.Since(began).Round(10*time.Millisecond), w.cs.Dir)
	var paths []string
	for _, c := range w.cs.All() {
		paths = append(paths, c.GatewayKubeconfigPath)
	}
	w.kubeconfig = strings.Join(paths, string(os.PathListSeparator))
	for _, c := range w.cs.Members {
		w.members = append(w.members, &member{Cluster: c})
	}

	step := time.Now()
	for _, img := range []images.Image{w.mcsd[0], w.mcsd[1], w.coredns, w.echo} {
		if err := w.cs.ImportImage(ctx, img); err != nil {
			return w, err
		}
	}
	t.Logf("figure: 4 images imported into every node in %v", time.Since(step).Round(10*time.Millisecond))
	for _, m := range w.members {
		// The cluster's own DNS, there before mcsd.
		if err := w.installCoreDNS(ctx, m); err != nil {
			return w, err
		}
	}
	return w, nil
}

// buildImages builds the images the tests import: two tags of mcsd's own
// image (make image's recipe), CoreDNS and the echo server.
func (w *world) buildImages(ctx context.Context) error {
	var err error
	for i, tag := range []string{"v0.0.0-realnode-a", "v0.0.0-realnode-b"} {
		if w.mcsd[i], err = images.MCSD(ctx, tag); err != nil {
			return err
		}
	}
	if w.coredns, err = images.CoreDNS(ctx); err != nil {
		return err
	}
	w.echo, err = images.Echo(ctx)
	return err
}

// buildPlugin builds the operator's CLI of the source tree at root as the
// kubectl plugin kubectl-mcs in binDir.
func buildPlugin(ctx context.Context, root, binDir string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-o", filepath.Join(binDir, "kubectl-mcs"), "./cmd/kubectl-mcs")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("building kubectl-mcs of %s: %v\n%s", root, err, out)
	}
	return nil
}

// kubectl runs the pinned kubectl as an operator would, on a machine of the
// clusters' network (the run's operator namespace: the broker address the
// members were given is not reachable from the test's own network), with
// every cluster's context and kubectl-mcs on PATH, in dir (the repository
// when empty).
func (w *world) kubectl(ctx context.Context, dir string, args ...string) (string, error) {
	return w.kubectlWith(ctx, w.binDir, dir, args...)
}

// kubectlWith is kubectl with the kubectl-mcs of binDir: another version
// of the CLI, such as the one an upgrade starts from.
func (w *world) kubectlWith(ctx context.Context, binDir, dir string, args ...string) (string, error) {
	cmd := w.cs.Operator.Command(ctx, w.kubectlPath, args...)
	cmd.Dir = dir
	if dir == "" {
		cmd.Dir = w.root
	}
	cmd.Env = append(os.Environ(), "KUBECONFIG="+w.kubeconfig, "PATH="+binDir+string(os.PathListSeparator)+os.Getenv("PATH"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("kubectl %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}
