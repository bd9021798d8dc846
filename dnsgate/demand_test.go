package dnsgate

import (
	"context"
	"net/netip"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
	mcsinformers "sigs.k8s.io/mcs-api/pkg/client/informers/externalversions"
)

// node is another node's gate, run as its node agent runs it, on the
// world's clients, with its own ServiceImport informer.
type node struct {
	gate   *Gate
	dns    *dnsIndex
	cancel context.CancelFunc
}

func (w *world) node(name string) *node {
	w.t.Helper()
	ctx, cancel := context.WithCancel(w.ctx)
	factory := mcsinformers.NewSharedInformerFactory(w.imports, 0)
	n := &node{dns: &dnsIndex{handed: map[netip.Addr]bool{}}, cancel: cancel}
	g, err := New(Config{Client: w.client, Namespace: ns, NodeName: name, Families: []corev1.IPFamily{corev1.IPv4Protocol}, Downstream: n.dns,
		Writing: Writing{MinWrite: time.Millisecond}, Imports: factory.Multicluster().V1beta1().ServiceImports().Informer()})
	if err != nil {
		w.t.Fatal(err)
	}
	n.gate = g
	factory.Start(ctx.Done())
	go g.Run(ctx)
	return n
}

// updateImport writes a ServiceImport again at resourceVersion rv, as its
// status or ports change, and waits until every gate has seen it.
func (w *world) updateImport(name, rv string, ips []string, gates ...*Gate) {
	w.t.Helper()
	si := &mcsv1beta1.ServiceImport{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name, ResourceVersion: rv}, Spec: mcsv1beta1.ServiceImportSpec{IPs: ips}}
	if _, err := w.imports.MulticlusterV1beta1().ServiceImports("shop").Update(w.ctx, si, metav1.UpdateOptions{}); err != nil {
		w.t.Fatal(err)
	}
	for _, g := range gates {
		w.await("a gate sees ServiceImport "+name+" at "+rv, func() bool {
			g.mu.Lock()
			defer g.mu.Unlock()
			return g.imports["shop/"+name].rv == rv
		})
	}
}

// reportWrites counts the writes of a node's report so far.
func (w *world) reportWrites(node string) int {
	n := 0
	for _, a := range w.client.Actions() {
		if o, ok := a.(interface{ GetObject() runtime.Object }); ok && a.GetResource().Resource == "leases" {
			if l, ok := o.GetObject().(*coordinationv1.Lease); ok && l.Name == LeaseName(node) {
				n++
			}
		}
	}
	return n
}

func (w *world) writtenReport(node string) Report {
	l, err := w.client.CoordinationV1().Leases(ns).Get(w.ctx, LeaseName(node), metav1.GetOptions{})
	if err != nil {
		return Report{}
	}
	return reportOf(l)
}

// The writes of a ServiceImport that bring no new ClusterSetIP (its status,
// its ports) cost no node a report write: nothing waits for them.
func TestWritesThatBringNoClusterSetIPCostNoReportWrite(t *testing.T) {
	w := start(t)
	b := w.node("node-b")
	w.podOn("node-b", true)
	w.importOf("web", "10", vip.String())
	carried(w, vip.String())
	b.gate.VIPsProgrammed(corev1.IPv4Protocol, []netip.Addr{vip}, nil)
	w.await("handed out on both nodes", func() bool { return w.dns.hands(vip) && b.dns.hands(vip) })
	w.await("both reports settled", func() bool {
		w.clock.Step(DefaultMinWrite)
		a, b := w.writtenReport("node-a"), w.writtenReport("node-b")
		return a.Through == "10" && len(a.Pending) == 0 && b.Through == "10" && len(b.Pending) == 0
	})
	a0, b0 := w.reportWrites("node-a"), w.reportWrites("node-b")

	for i, rv := range []string{"11", "12", "13", "14", "15"} {
		w.updateImport("web", rv, []string{vip.String()}, w.gate, b.gate)
		w.importOf("headless"+string(rune('a'+i)), rv+"5")
		w.clock.Step(DefaultMinWrite)
	}
	// A new ClusterSetIP after them: written once by each node, at the
	// newest version each has seen.
	w.importOf("api", "20", "243.1.0.2")
	w.await("node-b reports api", func() bool { return w.writtenReport("node-b").Through == "20" })
	w.await("node-a reports api", func() bool {
		w.clock.Step(DefaultMinWrite)
		return w.writtenReport("node-a").Through == "20"
	})
	if a, b := w.reportWrites("node-a")-a0, w.reportWrites("node-b")-b0; a != 1 || b != 1 {
		t.Fatalf("report writes for 10 ServiceImport writes and one new ClusterSetIP: node-a %d, node-b %d; want 1 each", a, b)
	}
	if !w.dns.hands(vip) || !b.dns.hands(vip) {
		t.Fatal("a handed-out ClusterSetIP was taken back by the writes of its ServiceImport")
	}
}

// A node that lists the ServiceImports anew (its agent restarted) sees
// them at their newest versions, which the other nodes' Throughs have not
// followed: it asks for them (Awaiting, the summary's Wanted), they move
// their Throughs on, and it hands the name out.
func TestANodeThatListsAnewGetsTheThroughItWaitsFor(t *testing.T) {
	w := start(t)
	b := w.node("node-b")
	w.podOn("node-a", true)
	w.podOn("node-b", true)
	w.importOf("web", "10", vip.String())
	carried(w, vip.String())
	b.gate.VIPsProgrammed(corev1.IPv4Protocol, []netip.Addr{vip}, nil)
	w.await("handed out on both nodes", func() bool {
		w.clock.Step(DefaultMinWrite)
		return w.dns.hands(vip) && b.dns.hands(vip)
	})
	w.updateImport("web", "11", []string{vip.String()}, w.gate, b.gate)
	w.updateImport("web", "12", []string{vip.String()}, w.gate, b.gate)
	if got := w.writtenReport("node-b").Through; got != "10" {
		t.Fatalf("node-b's Through is %s after writes that bring nothing new, want 10", got)
	}

	// node-b's agent restarts: it sees web at 12.
	b.cancel()
	b = w.node("node-b")
	b.gate.VIPsProgrammed(corev1.IPv4Protocol, []netip.Addr{vip}, nil)
	w.await("the restarted node-b hands web out", func() bool {
		w.clock.Step(DefaultMinWrite)
		return b.dns.hands(vip)
	})
	if r := w.writtenReport("node-b"); r.Awaiting != "12" {
		t.Errorf("the restarted node-b's report %+v, want Awaiting 12", r)
	}
	if r := w.writtenReport("node-a"); r.Through != "12" {
		t.Errorf("node-a's report %+v, want Through 12: node-b asked for it", r)
	}
}

// A summary from a controller that does not ask (no Wanted: an older
// version during an upgrade) keeps every node's Through at the newest
// version it has seen, as before.
func TestWithASummaryThatDoesNotAskThroughFollowsEveryWrite(t *testing.T) {
	w := start(t)
	w.importOf("web", "10", vip.String())
	carried(w, vip.String())
	w.await("handed out", func() bool { return w.dns.hands(vip) })
	w.gate.setSummary(&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: SummaryLeaseName,
		Annotations: map[string]string{AnnotationThrough: "10", AnnotationLiveNodes: "1"}}})
	w.updateImport("web", "11", []string{vip.String()}, w.gate)
	if r := w.gate.Report(); r.Through != "11" {
		t.Fatalf("report %+v under a summary that does not ask, want Through 11", r)
	}
}

// A live node of an older version (its report has no Awaiting) neither asks
// nor is asked, and holds back what it carries until Through reaches the
// newest version of its ServiceImport: the summary then does not ask, and
// every node's Through follows every write, as before.
func TestWithAnOlderNodeLiveThroughFollowsEveryWrite(t *testing.T) {
	w := start(t)
	w.podOn("node-old", true)
	l := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: LeaseName("node-old"), Labels: map[string]string{LabelComponent: ComponentNodeReport},
			Annotations: map[string]string{AnnotationThrough: "10", AnnotationPending: ""}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("node-old")},
	}
	if _, err := w.client.CoordinationV1().Leases(ns).Create(w.ctx, l, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	w.await("a summary that does not ask", func() bool { s := w.agg.Summary(); return s.LiveNodes == 1 && !s.Asks })
	w.settled()
	w.importOf("web", "10", vip.String())
	carried(w, vip.String())
	w.updateImport("web", "11", []string{vip.String()}, w.gate)
	if r := w.gate.Report(); r.Through != "11" {
		t.Fatalf("report %+v beside an older node, want Through 11", r)
	}
}
