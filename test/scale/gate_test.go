package scale

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
	"k8s.io/client-go/util/retry"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/mcsd-io/mcsd/dnsgate"
	"github.com/mcsd-io/mcsd/test/lib/fixture"
	"github.com/mcsd-io/mcsd/test/lib/harness"
)

// gateNamespace holds the reports, the summary and the node agents' pods
// (mcsd's default --leader-elect-namespace); gateImports the
// ServiceImports.
const (
	gateNamespace = "mcsd-system"
	gateImports   = "gate-bench"
)

// BenchmarkDNSGate measures what one batch of new ClusterSetIPs costs the
// DNS gate with MCSD_GATE_NODES simulated nodes (default "100,500"): one
// gatenode process per node (the gate's report writer and summary watcher,
// with a stand-in proxier), one running the controller's Aggregator, on a
// fresh cluster each. MCSD_GATE_BATCH ServiceImports (default 40) are
// created at once; the table shows the API server's Lease writes and
// watch events, its CPU time, and how long until every node may hand out
// each ClusterSetIP, beside what every node watching every report would
// cost. Then every ServiceImport of the batch is written again without a
// new ClusterSetIP (as the importer writes statuses), and one more is
// created: the table shows those Lease writes too.
func BenchmarkDNSGate(b *testing.B) {
	nodes, batch, err := gateSizes()
	if err != nil {
		b.Fatal(err)
	}
	bin := filepath.Join(b.TempDir(), "gatenode")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/mcsd-io/mcsd/test/cmd/gatenode").CombinedOutput(); err != nil {
		b.Fatalf("building gatenode: %v\n%s", err, out)
	}
	var rows []gateResult
	for _, n := range nodes {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			for range b.N {
				r := runGate(b, bin, n, batch)
				reportGate(b, r)
				rows = append(rows, r)
			}
		})
	}
	printGateTable(os.Stdout, rows)
}

// gateSizes reads MCSD_GATE_NODES, the numbers of nodes to run with
// (default "100,500"), and MCSD_GATE_BATCH, the ServiceImports of the
// batch (default 40).
func gateSizes() (nodes []int, batch int, err error) {
	for _, f := range strings.Split(cmp.Or(os.Getenv("MCSD_GATE_NODES"), "100,500"), ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, 0, fmt.Errorf("MCSD_GATE_NODES: %q is not a positive number", f)
		}
		nodes = append(nodes, n)
	}
	// Their ClusterSetIPs are vipOf(1) to vipOf(batch).
	batch, err = strconv.Atoi(cmp.Or(os.Getenv("MCSD_GATE_BATCH"), "40"))
	if err != nil || batch < 1 || batch > 60000 {
		return nil, 0, fmt.Errorf("MCSD_GATE_BATCH=%q: give a number of ServiceImports from 1 to 60000", os.Getenv("MCSD_GATE_BATCH"))
	}
	return nodes, batch, nil
}

// gateResult is what one run measured over the batch, from the first
// ServiceImport's creation until the Lease writes stopped.
type gateResult struct {
	nodes, batch          int
	loadBefore, loadAfter string
	// reportWrites and summaryWrites are the Lease writes of the nodes'
	// reports and of the summary, leaseWrites those of every Lease the API
	// server served (its own identity Lease's too); leaseEvents the Lease
	// watch events the API server sent the gate's processes, importEvents
	// those of ServiceImports (the proxier's feed, the same in any design).
	reportWrites, summaryWrites, leaseWrites float64
	leaseEvents, importEvents                float64
	// droppedWatches are the watches of Leases and ServiceImports the API
	// server closed because their client fell behind: each costs a relist
	// instead of the events it missed.
	droppedWatches float64
	// cpu by process: the API server, etcd, the aggregator, all nodes.
	apiserverCPU, etcdCPU, aggregatorCPU, nodesCPU time.Duration
	// churnReportWrites and churnSummaryWrites are the Lease writes of a
	// write of each ServiceImport of the batch that brings no
	// ClusterSetIP, followed by one new ClusterSetIP.
	churnReportWrites, churnSummaryWrites float64
	// nodesRSS is the resident memory of all node processes.
	nodesRSS int64
	// released is, per ClusterSetIP, from its ServiceImport's creation
	// until the last node released it; firstReleased until the first did.
	released, firstReleased []time.Duration
}

func runGate(b *testing.B, bin string, n, batch int) gateResult {
	res := gateResult{nodes: n, batch: batch, loadBefore: loadAverage()}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Minute)
	defer cancel()
	cs := harness.Start(b, harness.Options{Clusters: 1})
	c := cs.Members[0]
	for _, ns := range []string{gateNamespace, gateImports} {
		if _, err := c.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	if err := readyNodeAgentPods(ctx, c, n); err != nil {
		b.Fatal(err)
	}

	agg, err := cs.StartProgram("gate-aggregator", bin, "-kubeconfig="+c.KubeconfigPath, "-namespace="+gateNamespace, "-controller")
	if err != nil {
		b.Fatal(err)
	}
	nodes := make([]*harness.Program, n)
	for i := range nodes {
		if nodes[i], err = cs.StartProgram(gateNodeName(i), bin, "-kubeconfig="+c.KubeconfigPath, "-namespace="+gateNamespace, "-node-name="+gateNodeName(i)); err != nil {
			b.Fatal(err)
		}
	}
	b.Logf("%d nodes: %d gatenode processes and the aggregator started", n, n)

	// Steady state first: every node's report in the summary, and one
	// ClusterSetIP released on every node.
	began := time.Now()
	if _, err := createImport(ctx, c, "warm-up", vipOf(0)); err != nil {
		b.Fatal(err)
	}
	if _, err := waitReleased(ctx, nodes, []netip.Addr{vipOf(0)}); err != nil {
		b.Fatalf("%v\n%s", err, agg.Tail(20))
	}
	if err := waitLiveNodes(ctx, c, n); err != nil {
		b.Fatalf("%v\n%s", err, agg.Tail(20))
	}
	if _, err := waitLeaseWritesSettle(ctx, c); err != nil {
		b.Fatal(err)
	}
	b.Logf("%d nodes: steady in %v", n, time.Since(began).Round(time.Millisecond))

	gateLeases, err := watchGateLeases(ctx, c)
	if err != nil {
		b.Fatal(err)
	}
	before, err := apiServerMetrics(ctx, c)
	if err != nil {
		b.Fatal(err)
	}
	cpuBefore := gateCPU(c, agg, nodes)

	vips := make([]netip.Addr, batch)
	created := make([]time.Time, batch)
	for i := range vips {
		vips[i] = vipOf(i + 1)
	}
	err = fixture.InParallel(ctx, batch, batch, func(ctx context.Context, i int) error {
		at, err := createImport(ctx, c, fmt.Sprintf("svc-%05d", i), vips[i])
		created[i] = at
		return err
	})
	if err != nil {
		b.Fatal(err)
	}
	releases, err := waitReleased(ctx, nodes, vips)
	if err != nil {
		b.Fatalf("%v\n%s", err, agg.Tail(20))
	}
	after, err := waitLeaseWritesSettle(ctx, c)
	if err != nil {
		b.Fatal(err)
	}
	cpuAfter := gateCPU(c, agg, nodes)
	written := gateLeases.stop()

	// Then a write of every ServiceImport of the batch that brings no
	// ClusterSetIP, as the importer's status writes, and one new
	// ClusterSetIP after them: once every node has released that one, it
	// has seen the writes before it.
	churnLeases, err := watchGateLeases(ctx, c)
	if err != nil {
		b.Fatal(err)
	}
	if err := fixture.InParallel(ctx, batch, batch, func(ctx context.Context, i int) error {
		return touchImport(ctx, c, fmt.Sprintf("svc-%05d", i))
	}); err != nil {
		b.Fatal(err)
	}
	if _, err := createImport(ctx, c, "after-writes", vipOf(batch+1)); err != nil {
		b.Fatal(err)
	}
	if _, err := waitReleased(ctx, nodes, []netip.Addr{vipOf(batch + 1)}); err != nil {
		b.Fatalf("%v\n%s", err, agg.Tail(20))
	}
	if _, err := waitLeaseWritesSettle(ctx, c); err != nil {
		b.Fatal(err)
	}
	churn := churnLeases.stop()
	res.churnReportWrites, res.churnSummaryWrites = churn.reports, churn.summary

	res.reportWrites, res.summaryWrites = written.reports, written.summary
	res.leaseWrites = after.leaseWrites() - before.leaseWrites()
	// Of the Lease events the API server sent, one per write of any Lease
	// went to kube-controller-manager's garbage collector, which watches
	// every kind, and one per write of the gate's to the benchmark's own
	// watch: the rest went to the gate's processes.
	res.leaseEvents = after.watchEvents("leases") - before.watchEvents("leases") - res.leaseWrites - res.reportWrites - res.summaryWrites
	// The garbage collector got one event per ServiceImport too.
	res.importEvents = after.watchEvents("serviceimports") - before.watchEvents("serviceimports") - float64(batch)
	res.droppedWatches = after.droppedWatches() - before.droppedWatches()
	res.apiserverCPU = cpuAfter.apiserver - cpuBefore.apiserver
	res.etcdCPU = cpuAfter.etcd - cpuBefore.etcd
	res.aggregatorCPU = cpuAfter.aggregator - cpuBefore.aggregator
	res.nodesCPU = cpuAfter.nodes - cpuBefore.nodes
	res.nodesRSS = cpuAfter.nodesRSS
	for i, a := range vips {
		var first, last time.Time
		for _, at := range releases {
			t := at[a]
			if first.IsZero() || t.Before(first) {
				first = t
			}
			last = later(last, t)
		}
		res.firstReleased = append(res.firstReleased, first.Sub(created[i]))
		res.released = append(res.released, last.Sub(created[i]))
	}
	res.loadAfter = loadAverage()
	return res
}

func gateNodeName(i int) string { return fmt.Sprintf("gate-node-%04d", i) }

// readyNodeAgentPods creates a node agent's pod on each of n nodes, Ready
// as a kubelet would say: what makes the aggregator count a node.
func readyNodeAgentPods(ctx context.Context, c *harness.Cluster, n int) error {
	podLabels, err := labels.ConvertSelectorToLabelsMap(dnsgate.DefaultPeerPods)
	if err != nil {
		return err
	}
	// The ServiceAccount admission plugin refuses pods until the
	// namespace's default ServiceAccount exists.
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := c.Kube.CoreV1().ServiceAccounts(gateNamespace).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	})
	if err != nil {
		return fmt.Errorf("no default ServiceAccount in %s: %w", gateNamespace, err)
	}
	pods := c.Kube.CoreV1().Pods(gateNamespace)
	return fixture.InParallel(ctx, 32, n, func(ctx context.Context, i int) error {
		pod, err := pods.Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "mcsd-node-agent-" + strconv.Itoa(i), Labels: podLabels},
			Spec: corev1.PodSpec{
				NodeName:   gateNodeName(i),
				Containers: []corev1.Container{{Name: "mcsd", Image: "mcsd"}},
			},
		}, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		pod.Status.Phase = corev1.PodRunning
		pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()}}
		_, err = pods.UpdateStatus(ctx, pod, metav1.UpdateOptions{})
		return err
	})
}

// createImport creates a ServiceImport with a ClusterSetIP, as the
// importer does, and returns when it began.
func createImport(ctx context.Context, c *harness.Cluster, name string, vip netip.Addr) (time.Time, error) {
	si := &mcsv1beta1.ServiceImport{
		ObjectMeta: metav1.ObjectMeta{Namespace: gateImports, Name: name},
		Spec: mcsv1beta1.ServiceImportSpec{
			Type:       mcsv1beta1.ClusterSetIP,
			IPs:        []string{vip.String()},
			IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol},
			Ports:      []mcsv1beta1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}},
		},
	}
	began := time.Now()
	_, err := c.MCS.MulticlusterV1beta1().ServiceImports(gateImports).Create(ctx, si, metav1.CreateOptions{})
	return began, err
}

// touchImport writes a ServiceImport again without changing its
// ClusterSetIPs, as a status write does.
func touchImport(ctx context.Context, c *harness.Cluster, name string) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		si, err := c.MCS.MulticlusterV1beta1().ServiceImports(gateImports).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if si.Annotations == nil {
			si.Annotations = map[string]string{}
		}
		si.Annotations["bench.mcsd.io/touched"] = time.Now().Format(time.RFC3339Nano)
		_, err = c.MCS.MulticlusterV1beta1().ServiceImports(gateImports).Update(ctx, si, metav1.UpdateOptions{})
		return err
	})
}

// waitReleased waits until every node has printed that it released each
// of vips, and returns when each did, by node.
func waitReleased(ctx context.Context, nodes []*harness.Program, vips []netip.Addr) ([]map[netip.Addr]time.Time, error) {
	out := make([]map[netip.Addr]time.Time, len(nodes))
	missing := 0
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 20*time.Minute, true, func(context.Context) (bool, error) {
		missing = 0
		for i, node := range nodes {
			if len(out[i]) == len(vips) {
				continue
			}
			got, err := releasedBy(node.LogPath())
			if err != nil {
				return false, err
			}
			out[i] = map[netip.Addr]time.Time{}
			for _, a := range vips {
				if t, ok := got[a]; ok {
					out[i][a] = t
				} else {
					missing++
				}
			}
		}
		return missing == 0, nil
	})
	if err != nil {
		return nil, fmt.Errorf("%d releases of %d ClusterSetIPs on %d nodes missing: %w", missing, len(vips), len(nodes), err)
	}
	return out, nil
}

// releasedBy reads the "released <address> <unix nanoseconds>" lines of a
// gatenode's log.
func releasedBy(path string) (map[netip.Addr]time.Time, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	out := map[netip.Addr]time.Time{}
	for _, line := range bytes.Split(data, []byte("\n")) {
		f := strings.Fields(string(line))
		if len(f) != 3 || f[0] != "released" {
			continue
		}
		a, err1 := netip.ParseAddr(f[1])
		ns, err2 := strconv.ParseInt(f[2], 10, 64)
		if err1 == nil && err2 == nil {
			out[a] = time.Unix(0, ns)
		}
	}
	return out, nil
}

// waitLiveNodes waits until the summary covers n live nodes.
func waitLiveNodes(ctx context.Context, c *harness.Cluster, n int) error {
	var live string
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 10*time.Minute, true, func(ctx context.Context) (bool, error) {
		l, err := c.Kube.CoordinationV1().Leases(gateNamespace).Get(ctx, dnsgate.SummaryLeaseName, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		live = l.Annotations[dnsgate.AnnotationLiveNodes]
		return live == strconv.Itoa(n), nil
	})
	if err != nil {
		return fmt.Errorf("the summary covers %q live nodes, not %d: %w", live, n, err)
	}
	return nil
}

// gateMetrics is one scrape of the API server's /metrics.
type gateMetrics sample

func apiServerMetrics(ctx context.Context, c *harness.Cluster) (gateMetrics, error) {
	raw, err := c.Kube.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading the API server's metrics: %w", err)
	}
	s, err := parseSample(bytes.NewReader(raw))
	return gateMetrics(s), err
}

// leaseWrites are the creates and updates of Leases served so far.
func (m gateMetrics) leaseWrites() float64 {
	total := 0.0
	for _, verb := range []string{"POST", "PUT"} {
		total += sample(m).sum("apiserver_request_total", map[string]string{"resource": "leases", "verb": verb})
	}
	return total
}

// watchEvents are the events of a resource sent to watchers so far.
func (m gateMetrics) watchEvents(resource string) float64 {
	return sample(m).sum("apiserver_watch_events_total", map[string]string{"resource": resource})
}

// droppedWatches are the watches of Leases and ServiceImports closed so
// far because their client fell behind.
func (m gateMetrics) droppedWatches() float64 {
	return sample(m).sum("apiserver_terminated_watchers_total", map[string]string{"resource": "leases"}) +
		sample(m).sum("apiserver_terminated_watchers_total", map[string]string{"resource": "serviceimports"})
}

// waitLeaseWritesSettle waits until the Lease writes have stopped for a
// second and returns the scrape that shows it.
func waitLeaseWritesSettle(ctx context.Context, c *harness.Cluster) (gateMetrics, error) {
	var last gateMetrics
	err := wait.PollUntilContextTimeout(ctx, time.Second, 10*time.Minute, false, func(ctx context.Context) (bool, error) {
		m, err := apiServerMetrics(ctx, c)
		if err != nil {
			return false, err
		}
		settled := last != nil && m.leaseWrites() == last.leaseWrites()
		last = m
		return settled, nil
	})
	return last, err
}

// leaseWatch counts the writes of the gate's Leases, reports and summary
// apart, from a version on.
type leaseWatch struct {
	w    watch.Interface
	done chan leaseWrites
}

type leaseWrites struct{ reports, summary float64 }

func watchGateLeases(ctx context.Context, c *harness.Cluster) (*leaseWatch, error) {
	leases := c.Kube.CoordinationV1().Leases(gateNamespace)
	list, err := leases.List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	// The API server closes a watch whose client falls behind, as this
	// one may while hundreds of processes share two cores: it resumes
	// where it was.
	w, err := watchtools.NewRetryWatcherWithContext(ctx, list.ResourceVersion, &cache.ListWatch{
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) { return leases.Watch(ctx, o) },
	})
	if err != nil {
		return nil, err
	}
	lw := &leaseWatch{w: w, done: make(chan leaseWrites, 1)}
	go func() {
		var n leaseWrites
		for ev := range w.ResultChan() {
			l, ok := ev.Object.(*coordinationv1.Lease)
			if !ok || (ev.Type != watch.Added && ev.Type != watch.Modified) {
				continue
			}
			switch l.Labels[dnsgate.LabelComponent] {
			case dnsgate.ComponentNodeReport:
				n.reports++
			case dnsgate.ComponentSummary:
				n.summary++
			}
		}
		lw.done <- n
	}()
	return lw, nil
}

// stop ends the watch and returns the writes it saw.
func (lw *leaseWatch) stop() leaseWrites {
	lw.w.Stop()
	return <-lw.done
}

// gateUse is the CPU time of the run's processes so far, and the node
// processes' memory.
type gateUse struct {
	apiserver, etcd, aggregator, nodes time.Duration
	nodesRSS                           int64
}

func gateCPU(c *harness.Cluster, agg *harness.Program, nodes []*harness.Program) gateUse {
	u := gateUse{apiserver: c.APIServerUsage().CPU, etcd: c.EtcdUsage().CPU, aggregator: agg.Usage().CPU}
	for _, n := range nodes {
		nu := n.Usage()
		u.nodes += nu.CPU
		u.nodesRSS += nu.RSS
	}
	return u
}
