package dnsgate

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/resourceversion"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
)

// Observer learns which ClusterSetIPs may be handed out: the DNS index's
// VIPsProgrammed, in the shape of the proxier's VIPObserver.
type Observer interface {
	VIPsProgrammed(family corev1.IPFamily, added, removed []netip.Addr)
}

// Defaults of Config.
const (
	DefaultMinWrite   = 50 * time.Millisecond
	DefaultMaxPending = 1000
	// DefaultPeerPods selects the node agents of manifests/mcsd.
	DefaultPeerPods = "app.kubernetes.io/name=mcsd,app.kubernetes.io/component=node-agent"
)

// Config says whose data plane the gate reports on and whom it tells.
type Config struct {
	// Client writes this node's report and watches the cluster's summary.
	Client kubernetes.Interface
	// Namespace holds the report Leases and the summary (mcsd's own).
	Namespace string
	// NodeName is this node's name; it names the node's report.
	NodeName string
	// Families are the IP families the proxier programs; ClusterSetIPs of
	// other families are neither reported nor held back.
	Families []corev1.IPFamily
	// Downstream is told what may be handed out; nil when this node
	// serves no DNS (its report still counts for the others).
	Downstream Observer
	// Imports is the informer of the local cluster's ServiceImports that
	// the proxier is fed from; the gate adds its handler to it.
	Imports cache.SharedIndexInformer
	// Writing paces the report's writes (MinWrite: a burst of syncs costs
	// one write) and caps its Pending list (MaxPending, default
	// DefaultMaxPending: beyond it the report says less, an older Through
	// and nothing pending, and holds back as much).
	Writing
}

// Gate is one node's part: its proxier's observer, its report's writer and
// its DNS's gate.
type Gate struct {
	cfg     Config
	summary informers.SharedInformerFactory
	publish chan struct{}
	// importsSynced says the gate has seen every ServiceImport of the
	// informer's initial list.
	importsSynced func() bool

	// evalMu orders evaluations, so that Downstream hears of each change
	// once and in order.
	evalMu sync.Mutex

	mu sync.Mutex
	// reported are the families the proxier has reported once (key: is
	// IPv4); carried is what it carries now.
	reported map[bool]bool
	carried  map[netip.Addr]bool
	// imports are the ServiceImports seen, with their resourceVersion and
	// the ClusterSetIPs of gated families they list; owners index them by
	// ClusterSetIP.
	imports map[string]importEntry
	owners  map[netip.Addr]map[string]string
	// newest is the newest resourceVersion of a ServiceImport seen;
	// through is the report's Through, which follows it only when
	// something waits for it (advance); awaiting is the report's Awaiting.
	newest   string
	through  string
	awaiting string
	// orderless is set once a resourceVersion does not compare (an API
	// server that does not use integers): every node then hands out what
	// it carries itself, as without this gate.
	orderless bool

	// cluster is the summary of the live nodes' reports (nil until there
	// is one); clusterPending is its Pending as a set. summarySynced says
	// the summary's informer has listed.
	cluster        *Summary
	clusterPending map[netip.Addr]bool
	summarySynced  bool

	// released is what Downstream was told may be handed out; told are the
	// families it has heard of once.
	released map[netip.Addr]bool
	told     map[bool]bool
}

// importEntry is a ServiceImport as the gate keeps it: its
// resourceVersion and the ClusterSetIPs of gated families it lists. owners
// holds, for each of those, the version at which the gate first saw it
// listed, which later writes of the ServiceImport (its status, its ports)
// leave as it was.
type importEntry struct {
	rv   string
	vips []netip.Addr
}

// New returns a gate; Run starts it. Hand the gate to the proxier as its
// VIPObserver.
func New(cfg Config) (*Gate, error) {
	if cfg.Client == nil || cfg.Namespace == "" || cfg.NodeName == "" || cfg.Imports == nil {
		return nil, fmt.Errorf("dnsgate: a client, a namespace, the node's name and the ServiceImport informer are required")
	}
	cfg.Writing = cfg.Writing.withDefaults(DefaultMaxPending, "dnsgate")
	g := &Gate{
		cfg:      cfg,
		publish:  make(chan struct{}, 1),
		reported: map[bool]bool{},
		carried:  map[netip.Addr]bool{},
		imports:  map[string]importEntry{},
		owners:   map[netip.Addr]map[string]string{},
		released: map[netip.Addr]bool{},
		told:     map[bool]bool{},
	}
	// The summary alone: one object, whatever the number of nodes.
	g.summary = informers.NewSharedInformerFactoryWithOptions(cfg.Client, 0,
		informers.WithNamespace(cfg.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", SummaryLeaseName).String()
		}))
	_, err := g.summary.Coordination().V1().Leases().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { g.setSummary(obj) },
		UpdateFunc: func(_, obj any) { g.setSummary(obj) },
		DeleteFunc: g.deleteSummary,
	})
	if err != nil {
		return nil, err
	}
	reg, err := cfg.Imports.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { g.setImport(obj) },
		UpdateFunc: func(_, obj any) { g.setImport(obj) },
		DeleteFunc: g.deleteImport,
	})
	if err != nil {
		return nil, err
	}
	g.importsSynced = reg.HasSynced
	return g, nil
}

// gated says whether the gate reports on an address's family.
func (g *Gate) gated(a netip.Addr) bool {
	for _, f := range g.cfg.Families {
		if (f == corev1.IPv4Protocol) == a.Is4() {
			return true
		}
	}
	return false
}

// VIPsProgrammed is told by the proxier of one family, after each sync
// that committed rules, which ClusterSetIPs it now carries and no longer
// carries.
func (g *Gate) VIPsProgrammed(family corev1.IPFamily, added, removed []netip.Addr) {
	g.mu.Lock()
	for _, a := range removed {
		delete(g.carried, a.Unmap())
	}
	for _, a := range added {
		g.carried[a.Unmap()] = true
	}
	g.reported[family == corev1.IPv4Protocol] = true
	g.mu.Unlock()
	g.changed()
}

func (g *Gate) setImport(obj any) {
	si, ok := obj.(*mcsv1beta1.ServiceImport)
	if !ok {
		return
	}
	e := importEntry{rv: si.ResourceVersion}
	for _, s := range si.Spec.IPs {
		if a, err := netip.ParseAddr(s); err == nil && g.gated(a.Unmap()) {
			e.vips = append(e.vips, a.Unmap())
		}
	}
	key := si.Namespace + "/" + si.Name
	g.mu.Lock()
	since := map[netip.Addr]string{}
	for _, a := range g.imports[key].vips {
		since[a] = g.owners[a][key]
	}
	g.forget(key)
	g.imports[key] = e
	brings := false
	for _, a := range e.vips {
		if g.owners[a] == nil {
			g.owners[a] = map[string]string{}
		}
		rv, listed := since[a]
		if !listed {
			rv, brings = e.rv, true
		}
		g.owners[a][key] = rv
	}
	if g.newest == "" || g.newer(e.rv, g.newest) {
		g.newest = e.rv
	}
	// A ClusterSetIP new to this node: every node sees it in the same
	// write, and their Throughs move to it together.
	if brings && (g.through == "" || g.newer(e.rv, g.through)) {
		g.through = e.rv
	}
	g.advance()
	g.mu.Unlock()
	g.changed()
}

// advance moves Through to the newest version seen when something waits
// for it: the summary's Wanted or this node's own Awaiting is above it, or
// the summary comes from a controller that does not ask (it then follows
// every write, as it always did). g.mu must be held.
func (g *Gate) advance() {
	switch {
	case g.newest == "" || g.through == g.newest:
	case g.through == "", g.cluster == nil || !g.cluster.Asks:
		g.through = g.newest
	case g.cluster.Wanted != "" && g.newer(g.cluster.Wanted, g.through),
		g.awaiting != "" && g.newer(g.awaiting, g.through):
		g.through = g.newest
	}
}

func (g *Gate) deleteImport(obj any) {
	si, ok := deleted[*mcsv1beta1.ServiceImport](obj)
	if !ok {
		return
	}
	g.mu.Lock()
	g.forget(si.Namespace + "/" + si.Name)
	g.mu.Unlock()
	g.changed()
}

// forget drops an import from the gate's view. g.mu must be held.
func (g *Gate) forget(key string) {
	for _, a := range g.imports[key].vips {
		delete(g.owners[a], key)
		if len(g.owners[a]) == 0 {
			delete(g.owners, a)
		}
	}
	delete(g.imports, key)
}

// newer says whether resourceVersion a is above b. g.mu must be held. A
// pair that does not compare turns the gate orderless.
func (g *Gate) newer(a, b string) bool {
	c, err := resourceversion.CompareResourceVersion(a, b)
	if err != nil {
		if !g.orderless {
			g.orderless = true
			g.cfg.Logger.Info("ServiceImport resourceVersions do not compare; every node's DNS hands out what that node carries, without waiting for the others", "err", err)
		}
		return false
	}
	return c > 0
}

// atLeast says whether resourceVersion a is at or above b. g.mu must be
// held.
func (g *Gate) atLeast(a, b string) bool {
	if a == "" || b == "" {
		return false
	}
	return a == b || g.newer(a, b)
}

func (g *Gate) setSummary(obj any) {
	l, ok := obj.(*coordinationv1.Lease)
	if !ok || l.Name != SummaryLeaseName {
		return
	}
	sum := summaryOf(l)
	pending := make(map[netip.Addr]bool, len(sum.Pending))
	for _, a := range sum.Pending {
		pending[a] = true
	}
	g.mu.Lock()
	g.cluster, g.clusterPending = &sum, pending
	g.advance()
	g.mu.Unlock()
	g.changed()
}

func (g *Gate) deleteSummary(obj any) {
	l, ok := deleted[*coordinationv1.Lease](obj)
	if !ok || l.Name != SummaryLeaseName {
		return
	}
	g.mu.Lock()
	g.cluster, g.clusterPending = nil, nil
	g.mu.Unlock()
	g.changed()
}

// podReady says whether a pod is Ready and not on its way out: a deleted
// pod's node agent is stopping, and a new one reports anew.
func podReady(pod *corev1.Pod) bool {
	if pod.DeletionTimestamp != nil {
		return false
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// deleted is the object of an informer's delete event, which may come
// wrapped when the informer saw the deletion only on a relist.
func deleted[T any](obj any) (T, bool) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	o, ok := obj.(T)
	return o, ok
}

// changed re-evaluates what may be handed out and asks for the report to
// be written.
func (g *Gate) changed() {
	g.evaluate()
	g.askWrite()
}

// askWrite asks Run to write the report if it changed.
func (g *Gate) askWrite() {
	select {
	case g.publish <- struct{}{}:
	default:
	}
}

// evaluate tells Downstream which carried ClusterSetIPs every live node now
// carries too, and which this node no longer carries.
func (g *Gate) evaluate() {
	if g.cfg.Downstream == nil {
		return
	}
	g.evalMu.Lock()
	defer g.evalMu.Unlock()
	type delta struct{ added, removed []netip.Addr }
	out := map[bool]*delta{}
	of := func(a netip.Addr) *delta {
		d := out[a.Is4()]
		if d == nil {
			d = &delta{}
			out[a.Is4()] = d
		}
		return d
	}
	// Until the gate has seen every ServiceImport the proxier may already
	// carry, Downstream hears nothing: a DNS index told of a family is
	// ready, and would answer NXDOMAIN for what the gate cannot release
	// yet (the proxier's handler and the gate's run apart).
	if !g.importsSynced() {
		return
	}
	// Nor before there is a summary: the first thing DNS hears must
	// already hand out every name the cluster carries. The controller
	// writes one as soon as it has listed the reports.
	g.mu.Lock()
	if !g.summarySynced || g.cluster == nil {
		g.mu.Unlock()
		return
	}
	for v4, ok := range g.reported {
		if ok && !g.told[v4] {
			out[v4] = &delta{}
		}
	}
	for a := range g.released {
		if !g.carried[a] {
			delete(g.released, a)
			of(a).removed = append(of(a).removed, a)
		}
	}
	awaiting := g.awaiting
	for a := range g.carried {
		if g.released[a] {
			continue
		}
		if !g.everyNodeCarries(a) {
			// Held back for the summary's Through: ask every node for
			// it (a node that listed anew sees versions the others'
			// Throughs have not followed).
			if rv := g.versionOf(a); rv != "" && !g.atLeast(g.cluster.Through, rv) && (awaiting == "" || g.newer(rv, awaiting)) {
				awaiting = rv
			}
			continue
		}
		g.released[a] = true
		of(a).added = append(of(a).added, a)
	}
	if awaiting != g.awaiting {
		g.awaiting = awaiting
		g.advance()
	}
	for v4 := range out {
		g.told[v4] = true
	}
	g.mu.Unlock()
	for v4, d := range out {
		family := corev1.IPv6Protocol
		if v4 {
			family = corev1.IPv4Protocol
		}
		g.cfg.Downstream.VIPsProgrammed(family, d.added, d.removed)
		if len(d.added)+len(d.removed) > 0 {
			g.cfg.Logger.V(4).Info("ClusterSetIPs every live node carries changed", "ipFamily", family, "added", len(d.added), "removed", len(d.removed))
		}
	}
}

// everyNodeCarries says whether the summary shows a ClusterSetIP this node
// carries as carried by every live node. g.mu must be held.
func (g *Gate) everyNodeCarries(a netip.Addr) bool {
	if !g.gated(a) || g.orderless {
		return true
	}
	rv := g.versionOf(a)
	switch {
	case rv == "":
		// Carried, but the gate has not seen its ServiceImport yet.
		return false
	case g.cluster.Orderless || g.cluster.LiveNodes == 0:
		return true
	}
	return !g.clusterPending[a] && g.atLeast(g.cluster.Through, rv)
}

// versionOf is the version at which the gate first saw a ClusterSetIP
// listed, by the newest of the ServiceImports listing it ("" when none
// does). g.mu must be held.
func (g *Gate) versionOf(a netip.Addr) string {
	rv := ""
	for _, r := range g.owners[a] {
		if rv == "" || g.newer(r, rv) {
			rv = r
		}
	}
	return rv
}

// Report is what this node says now: Through, and the ClusterSetIPs of the
// ServiceImports seen that the proxier does not carry.
func (g *Gate) Report() Report {
	g.mu.Lock()
	defer g.mu.Unlock()
	r := Report{Through: g.through, Awaiting: g.awaiting}
	minRV := ""
	for a, owners := range g.owners {
		if g.carried[a] {
			continue
		}
		r.Pending = append(r.Pending, a)
		for _, rv := range owners {
			if minRV == "" || g.newer(minRV, rv) {
				minRV = rv
			}
		}
	}
	slices.SortFunc(r.Pending, func(a, b netip.Addr) int { return a.Compare(b) })
	if len(r.Pending) <= g.cfg.MaxPending {
		return r
	}
	// Too many to list: say only what is sure without them, the newest
	// import older than the oldest pending one.
	r = Report{Awaiting: g.awaiting}
	for _, e := range g.imports {
		if g.newer(minRV, e.rv) && (r.Through == "" || g.newer(e.rv, r.Through)) {
			r.Through = e.rv
		}
	}
	return r
}

// ready says whether the proxier has reported every gated family once: the
// report means something from then on.
func (g *Gate) ready() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, f := range g.cfg.Families {
		if !g.reported[f == corev1.IPv4Protocol] {
			return false
		}
	}
	return true
}

// Run watches the cluster's summary and writes this node's report, each
// time it changes, until ctx ends. Downstream hears nothing before the
// summary is listed.
func (g *Gate) Run(ctx context.Context) {
	g.summary.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), g.summary.Coordination().V1().Leases().Informer().HasSynced, g.importsSynced) {
		return
	}
	g.mu.Lock()
	g.summarySynced = true
	g.mu.Unlock()
	g.evaluate()
	w := &leaseWriter{client: g.cfg.Client, namespace: g.cfg.Namespace, name: LeaseName(g.cfg.NodeName), holder: g.cfg.NodeName, component: ComponentNodeReport, clock: g.cfg.Clock}
	var last *Report
	for {
		select {
		case <-ctx.Done():
			return
		case <-g.publish:
		}
		if !g.ready() {
			continue
		}
		// An unchanged report is not written again: whether the node is
		// alive is its pod's readiness, not a renewal.
		delay := g.cfg.MinWrite
		if r := g.Report(); last == nil || !r.equal(*last) {
			if err := w.write(ctx, r.annotate); err != nil {
				g.cfg.Logger.Error(err, "Writing this node's data-plane report; every node's DNS holds back new ClusterSetIPs until it is written", "lease", klog.KRef(g.cfg.Namespace, LeaseName(g.cfg.NodeName)))
				delay = writeRetry
				g.askWrite()
			} else {
				last = &r
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-g.cfg.Clock.After(delay):
		}
	}
}
