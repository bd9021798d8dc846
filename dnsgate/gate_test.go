package dnsgate

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
	mcsfake "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned/fake"
	mcsinformers "sigs.k8s.io/mcs-api/pkg/client/informers/externalversions"
)

const ns = "mcsd-system"

// dnsIndex records what the gate lets DNS hand out.
type dnsIndex struct {
	mu      sync.Mutex
	handed  map[netip.Addr]bool
	reports int
}

func (d *dnsIndex) VIPsProgrammed(_ corev1.IPFamily, added, removed []netip.Addr) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.reports++
	for _, a := range removed {
		delete(d.handed, a)
	}
	for _, a := range added {
		d.handed[a] = true
	}
}

func (d *dnsIndex) hands(a netip.Addr) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.handed[a]
}

type world struct {
	t       *testing.T
	ctx     context.Context
	client  *fake.Clientset
	imports *mcsfake.Clientset
	clock   *clocktesting.FakeClock
	gate    *Gate
	agg     *Aggregator
	dns     *dnsIndex
}

func start(t *testing.T) *world {
	t.Helper()
	w, factory := newWorld(t)
	factory.Start(w.ctx.Done())
	return w
}

// newWorld runs a gate whose ServiceImport informer the caller starts.
func newWorld(t *testing.T, objects ...runtime.Object) (*world, mcsinformers.SharedInformerFactory) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	w := &world{t: t, ctx: ctx, client: fake.NewClientset(), clock: clocktesting.NewFakeClock(time.Unix(1000, 0)), dns: &dnsIndex{handed: map[netip.Addr]bool{}}}
	w.imports = mcsfake.NewSimpleClientset(objects...)
	factory := mcsinformers.NewSharedInformerFactory(w.imports, 0)
	g, err := New(Config{Client: w.client, Namespace: ns, NodeName: "node-a", Families: []corev1.IPFamily{corev1.IPv4Protocol}, Downstream: w.dns, Writing: Writing{Clock: w.clock},
		Imports: factory.Multicluster().V1beta1().ServiceImports().Informer()})
	if err != nil {
		t.Fatal(err)
	}
	w.gate = g
	// The controller's part, on the real clock: the tests step the fake
	// one for this node's report alone.
	w.agg, err = NewAggregator(AggregatorConfig{Client: w.client, Namespace: ns, Holder: "controller", Writing: Writing{MinWrite: time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	go w.agg.Run(ctx)
	go g.Run(ctx)
	return w, factory
}

// settled waits until the gate has the summary of every report and pod
// the aggregator has seen.
func (w *world) settled() {
	w.t.Helper()
	w.await("the gate sees the summary of what the aggregator has", func() bool {
		want := w.agg.Summary()
		w.gate.mu.Lock()
		defer w.gate.mu.Unlock()
		return w.gate.cluster != nil && w.gate.cluster.equal(want)
	})
}

// importOf makes a ServiceImport as the API server would store it at
// resourceVersion rv, and waits until the gate has seen it.
func (w *world) importOf(name, rv string, ips ...string) {
	w.t.Helper()
	si := &mcsv1beta1.ServiceImport{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name, ResourceVersion: rv}, Spec: mcsv1beta1.ServiceImportSpec{IPs: ips}}
	if _, err := w.imports.MulticlusterV1beta1().ServiceImports("shop").Create(w.ctx, si, metav1.CreateOptions{}); err != nil {
		w.t.Fatal(err)
	}
	w.await("the gate sees ServiceImport "+name, func() bool {
		w.gate.mu.Lock()
		defer w.gate.mu.Unlock()
		return w.gate.imports["shop/"+name].rv == rv
	})
}

// peer writes another node's report, as its gate would, and makes its
// node agent's pod Ready.
func (w *world) peer(node, through string, pending ...string) {
	w.t.Helper()
	w.podOn(node, true)
	l := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: LeaseName(node), Labels: map[string]string{LabelComponent: ComponentNodeReport}},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To(node)},
	}
	r := Report{Through: through}
	for _, p := range pending {
		r.Pending = append(r.Pending, netip.MustParseAddr(p))
	}
	r.annotate(l)
	leases := w.client.CoordinationV1().Leases(ns)
	if _, err := leases.Update(w.ctx, l, metav1.UpdateOptions{}); err != nil {
		if _, err := leases.Create(w.ctx, l, metav1.CreateOptions{}); err != nil {
			w.t.Fatal(err)
		}
	}
	w.await("the aggregator sees the report of "+node, func() bool {
		w.agg.mu.Lock()
		defer w.agg.mu.Unlock()
		got := w.agg.reports[LeaseName(node)]
		return got != nil && got.report.equal(r)
	})
	w.settled()
}

// podOn makes the node agent's pod on node Ready or not, as the kubelet
// reports it.
func (w *world) podOn(node string, ready bool) {
	w.t.Helper()
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "mcsd-node-agent-" + node, Labels: map[string]string{"app.kubernetes.io/name": "mcsd", "app.kubernetes.io/component": "node-agent"}},
		Spec:       corev1.PodSpec{NodeName: node},
		Status:     corev1.PodStatus{Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: status}}},
	}
	pods := w.client.CoreV1().Pods(ns)
	if _, err := pods.Update(w.ctx, pod, metav1.UpdateOptions{}); err != nil {
		if _, err := pods.Create(w.ctx, pod, metav1.CreateOptions{}); err != nil {
			w.t.Fatal(err)
		}
	}
	w.await("the aggregator sees the pod on "+node, func() bool {
		w.agg.mu.Lock()
		defer w.agg.mu.Unlock()
		return (len(w.agg.readyPods[node]) > 0) == ready
	})
	w.settled()
}

func (w *world) await(what string, cond func() bool) {
	w.t.Helper()
	if err := wait.PollUntilContextTimeout(w.ctx, 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) { return cond(), nil }); err != nil {
		w.t.Fatalf("%s: %v", what, err)
	}
}

// holds checks that DNS does not hand a out; the gate decides on each
// change at once, so after a change it has seen, what it decided stays.
func (w *world) holds(a netip.Addr, why string) {
	w.t.Helper()
	w.gate.evaluate()
	if w.dns.hands(a) {
		w.t.Fatalf("DNS hands out %s although %s", a, why)
	}
}

func carried(w *world, ips ...string) {
	var addrs []netip.Addr
	for _, ip := range ips {
		addrs = append(addrs, netip.MustParseAddr(ip))
	}
	w.gate.VIPsProgrammed(corev1.IPv4Protocol, addrs, nil)
}

var vip = netip.MustParseAddr("243.1.0.1")

func TestAloneANodeHandsOutWhatItCarries(t *testing.T) {
	w := start(t)
	w.importOf("web", "10", vip.String())
	carried(w, vip.String())
	w.await("the carried ClusterSetIP handed out", func() bool { return w.dns.hands(vip) })
}

func TestAClusterSetIPWaitsForEveryNodeToCarryIt(t *testing.T) {
	w := start(t)
	w.peer("node-b", "9")
	w.importOf("web", "10", vip.String())
	carried(w, vip.String())
	w.holds(vip, "node-b has not seen the ServiceImport (Through 9 < 10)")

	w.peer("node-b", "10", vip.String())
	w.holds(vip, "node-b lists it pending")

	w.peer("node-b", "12")
	w.await("handed out once node-b carries it", func() bool { return w.dns.hands(vip) })

	// Handed out stays handed out while this node carries it.
	w.peer("node-b", "13", vip.String())
	w.gate.evaluate()
	if !w.dns.hands(vip) {
		t.Fatal("a handed-out ClusterSetIP was taken back because a peer listed it pending again")
	}
	w.gate.VIPsProgrammed(corev1.IPv4Protocol, nil, []netip.Addr{vip})
	w.await("taken back once this node no longer carries it", func() bool { return !w.dns.hands(vip) })
}

// A peer counts while its node agent's pod is Ready: once the kubelet (or
// the node lifecycle controller, for a dead node) says it is not, its
// report holds nothing back, however long ago it was written.
func TestAPeerWhosePodIsNotReadyHoldsNothingBack(t *testing.T) {
	w := start(t)
	w.peer("node-b", "1")
	w.importOf("web", "10", vip.String())
	carried(w, vip.String())
	w.holds(vip, "node-b's report is behind and its pod is Ready")
	w.podOn("node-b", false)
	w.await("handed out once node-b's pod is not Ready", func() bool { return w.dns.hands(vip) })
}

// A report without a Ready pod on its node (a node gone for good, or a
// report written by something else than a node agent) counts for nothing.
func TestAReportWithoutAReadyPodCountsForNothing(t *testing.T) {
	w := start(t)
	w.peer("node-b", "1")
	w.podOn("node-b", false)
	w.importOf("web", "10", vip.String())
	carried(w, vip.String())
	w.await("handed out: node-b has no Ready pod", func() bool { return w.dns.hands(vip) })
}

// An unchanged report is never written again: whether the node is alive
// is its pod's readiness, not a renewal.
func TestAnUnchangedReportIsNotWrittenAgain(t *testing.T) {
	w := start(t)
	w.importOf("web", "10", vip.String())
	carried(w, vip.String())
	w.await("the report written", func() bool {
		l, err := w.client.CoordinationV1().Leases(ns).Get(w.ctx, LeaseName("node-a"), metav1.GetOptions{})
		return err == nil && reportOf(l).Through == "10" && len(reportOf(l).Pending) == 0
	})
	before := w.reportWrites("node-a")
	// Changes that leave the report as it was: a peer's pod, the same
	// ClusterSetIP reported carried again, and time passing.
	w.podOn("node-c", true)
	carried(w, vip.String())
	for range 10 {
		w.clock.Step(time.Minute)
	}
	// The gate's loop ran for those changes: a new import with a
	// ClusterSetIP is written.
	w.importOf("api", "11", "243.1.0.2")
	w.await("the next report written", func() bool {
		w.clock.Step(DefaultMinWrite)
		l, err := w.client.CoordinationV1().Leases(ns).Get(w.ctx, LeaseName("node-a"), metav1.GetOptions{})
		return err == nil && reportOf(l).Through == "11"
	})
	if got := w.reportWrites("node-a") - before; got != 1 {
		t.Fatalf("%d writes of the report for one change, want 1", got)
	}
}

func TestThisNodesReportListsWhatItDoesNotCarryYet(t *testing.T) {
	w := start(t)
	w.importOf("web", "10", vip.String())
	w.importOf("api", "11", "243.1.0.2")
	w.gate.VIPsProgrammed(corev1.IPv4Protocol, []netip.Addr{netip.MustParseAddr("243.1.0.2")}, nil)
	var got Report
	w.await("the report written", func() bool {
		l, err := w.client.CoordinationV1().Leases(ns).Get(w.ctx, LeaseName("node-a"), metav1.GetOptions{})
		if err != nil {
			return false
		}
		got = reportOf(l)
		return got.Through == "11"
	})
	if !slices.Equal(got.Pending, []netip.Addr{vip}) {
		t.Fatalf("report lists %v pending, want [%s]", got.Pending, vip)
	}
	carried(w, vip.String())
	w.await("the report without pending addresses", func() bool {
		// Writes are spaced by MinWrite on the gate's clock.
		w.clock.Step(DefaultMinWrite)
		l, err := w.client.CoordinationV1().Leases(ns).Get(w.ctx, LeaseName("node-a"), metav1.GetOptions{})
		return err == nil && reportOf(l).Through == "11" && len(reportOf(l).Pending) == 0
	})
}

func TestATooLongReportSaysLess(t *testing.T) {
	w := start(t)
	w.gate.cfg.MaxPending = 2
	for i := range 3 {
		w.importOf(fmt.Sprintf("s%d", i), fmt.Sprint(20+i), fmt.Sprintf("243.1.0.%d", 10+i))
	}
	w.importOf("older", "5", "243.1.0.9")
	carried(w, "243.1.0.9")
	r := w.gate.Report()
	if r.Through != "5" || len(r.Pending) != 0 {
		t.Fatalf("report %+v, want Through 5 (the newest import older than every pending one) and nothing pending", r)
	}
}

func TestOnlyGatedFamiliesAreHeldBack(t *testing.T) {
	w := start(t)
	v6 := netip.MustParseAddr("fd7a:6d63:7364::1")
	w.importOf("web", "10", v6.String())
	if r := w.gate.Report(); len(r.Pending) != 0 {
		t.Fatalf("an IPv6 ClusterSetIP is pending on an IPv4-only node: %+v", r)
	}
}

// The proxier and the gate see ServiceImports through separate handlers: at
// start, the proxier may report a ClusterSetIP carried before the gate has
// seen its ServiceImport. DNS must not be told anything then (it would turn
// ready and answer NXDOMAIN for the name).
func TestDNSHearsNothingBeforeTheGateHasSeenEveryServiceImport(t *testing.T) {
	si := &mcsv1beta1.ServiceImport{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web", ResourceVersion: "10"}, Spec: mcsv1beta1.ServiceImportSpec{IPs: []string{vip.String()}}}
	w, factory := newWorld(t, si)
	carried(w, vip.String())
	w.gate.evaluate()
	w.dns.mu.Lock()
	reports := w.dns.reports
	w.dns.mu.Unlock()
	if reports != 0 {
		t.Fatalf("DNS was told %d times before the gate listed the ServiceImports", reports)
	}
	factory.Start(w.ctx.Done())
	w.await("handed out once the gate has seen its ServiceImport", func() bool { return w.dns.hands(vip) })
	w.dns.mu.Lock()
	defer w.dns.mu.Unlock()
	if w.dns.reports != 1 {
		t.Fatalf("DNS was told %d times, want once: its first report must already hand the name out", w.dns.reports)
	}
}
