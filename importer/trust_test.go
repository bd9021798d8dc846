package importer

import (
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	kuberecord "k8s.io/client-go/tools/record"
	"k8s.io/utils/ptr"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/mcsd-io/mcsd/broker"
	"github.com/mcsd-io/mcsd/internal/controller"
	"github.com/mcsd-io/mcsd/internal/merge"
	"github.com/mcsd-io/mcsd/internal/record"
	"github.com/mcsd-io/mcsd/liveness"
	"github.com/mcsd-io/mcsd/vipalloc"
)

// trustingController is a controller with only what the trust checks need.
func trustingController(clusterSet []netip.Prefix, owners map[string]string, declared map[string]string) (*Controller, *kuberecord.FakeRecorder) {
	rec := kuberecord.NewFakeRecorder(100)
	t := &trust{clusterSet: clusterSet, declared: map[string]broker.Declaration{}}
	var claims []vipalloc.Claim
	rev := uint64(1)
	for block, cluster := range owners {
		claims = append(claims, vipalloc.Claim{Block: netip.MustParsePrefix(block), Cluster: cluster, Name: block, Revision: rev})
		rev++
	}
	t.owners = vipalloc.Owners(claims)
	for cluster, cidrs := range declared {
		d := broker.Declaration{Cluster: cluster}
		for _, p := range strings.Split(cidrs, ",") {
			d.PodCIDRs = append(d.PodCIDRs, netip.MustParsePrefix(p))
		}
		t.declared[cluster] = d
	}
	m := NewMetrics(nil)
	return &Controller{
		Base:       &controller.Base{Metrics: m.Metrics},
		cfg:        Config{Shared: controller.Shared{ClusterID: "home", Recorder: rec}, Metrics: m},
		live:       staticLiveness{},
		records:    cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{byVIP: vipIndex}),
		trust:      t,
		undeclared: map[string]bool{},
		rejected:   map[string]map[string]rejection{},
	}, rec
}

var clusterSet = []netip.Prefix{netip.MustParsePrefix("243.0.0.0/8"), netip.MustParsePrefix("fd00:6d63:7364::/48")}

func vipExport(cluster string, created time.Time, vips ...string) record.Export {
	return record.Export{
		Cluster: cluster, Namespace: "shop", Name: "cart", Created: metav1.NewTime(created),
		Type:       mcsv1beta1.ClusterSetIP,
		Ports:      []mcsv1beta1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}},
		IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol},
		VIPs:       vips,
	}
}

func TestARecordsVIPCountsOnlyInsideTheClustersetAndABlockItsClusterOwns(t *testing.T) {
	c, _ := trustingController(clusterSet, map[string]string{"243.1.0.0/16": "east", "243.2.0.0/16": "attacker"}, nil)
	t0 := time.Date(2026, 11, 26, 9, 0, 0, 0, time.UTC)
	eastWeb := vipExport("east", t0, "243.1.0.7")
	for _, tc := range []struct {
		name, cluster, vip, reason string
		// others are the other records holding the VIP; exporters the
		// clusters exporting the service besides the record's own.
		others    []record.Export
		exporters []string
	}{
		{name: "a VIP of its own block", cluster: "east", vip: "243.1.0.7", reason: ""},
		{name: "an IPv4-mapped VIP of its own block", cluster: "east", vip: "::ffff:243.1.0.7", reason: ""},
		{name: "a VIP another cluster gives another service", cluster: "attacker", vip: "243.1.0.7", reason: ReasonClusterSetIPNotOwned,
			others: []record.Export{func() record.Export { e := eastWeb; e.Name = "other"; return e }()}},
		{name: "a VIP of another cluster's block for a service it exports with another VIP", cluster: "attacker", vip: "243.1.0.8", reason: ReasonClusterSetIPNotOwned,
			exporters: []string{"east"}},
		{name: "a copy of the VIP the owner gives the same service", cluster: "attacker", vip: "243.1.0.7", reason: "",
			others: []record.Export{eastWeb}, exporters: []string{"east"}},
		{name: "a VIP of no claimed block", cluster: "east", vip: "243.9.0.1", reason: ReasonClusterSetIPNotOwned},
		{name: "a VIP outside the clusterset", cluster: "east", vip: "10.96.0.10", reason: ReasonClusterSetIPOutsideRange},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := vipExport(tc.cluster, t0.Add(time.Minute), tc.vip)
			holders := []vipalloc.Holding{vipalloc.HoldingOf(e)}
			for _, o := range tc.others {
				holders = append(holders, vipalloc.HoldingOf(o))
			}
			if got, _ := c.trust.rule().Admit(netip.MustParseAddr(tc.vip), vipalloc.HoldingOf(e), holders, append([]string{tc.cluster}, tc.exporters...)); got != tc.reason {
				t.Fatalf("verdict %q, want %q", got, tc.reason)
			}
		})
	}
	t.Run("a claim outside the clusterset owns nothing there", func(t *testing.T) {
		c, _ := trustingController(clusterSet, map[string]string{"10.96.0.0/16": "attacker"}, nil)
		e := vipExport("attacker", t0, "10.96.0.10")
		if got, _ := c.trust.rule().Admit(netip.MustParseAddr("10.96.0.10"), vipalloc.HoldingOf(e), []vipalloc.Holding{vipalloc.HoldingOf(e)}, []string{"attacker"}); got != ReasonClusterSetIPOutsideRange {
			t.Fatalf("verdict %q", got)
		}
	})
}

// holding puts exports in c's record cache, where the VIP rule finds every
// record holding an address, and returns them.
func holding(t *testing.T, c *Controller, exports ...record.Export) []record.Export {
	t.Helper()
	c.records = cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{byVIP: vipIndex})
	for _, e := range exports {
		obj := &record.Cached{Export: e}
		obj.Name = record.Name(e.Cluster, e.Namespace, e.Name)
		if err := c.records.Add(obj); err != nil {
			t.Fatal(err)
		}
	}
	return exports
}

func TestARejectedVIPLeavesTheMergeTheNextValidOne(t *testing.T) {
	c, _ := trustingController(clusterSet, map[string]string{"243.1.0.0/16": "east", "243.2.0.0/16": "attacker"}, nil)
	t0 := time.Date(2026, 11, 26, 9, 0, 0, 0, time.UTC)
	// The attacker's record is the oldest and holds an address of the
	// victim's block that the victim, exporting the service too, does not
	// give it.
	exports := holding(t, c, vipExport("attacker", t0, "243.1.0.99"), vipExport("east", t0.Add(time.Minute), "243.1.0.7"))
	cached := slices.Clone(exports[0].VIPs)
	checked, rejected := c.checkVIPs(exports)
	if len(rejected) != 1 || rejected[0].cluster != "attacker" || rejected[0].reason != ReasonClusterSetIPNotOwned || !strings.Contains(rejected[0].message(), "243.1.0.99") {
		t.Fatalf("rejected %+v", rejected)
	}
	if !slices.Equal(cached, []string{"243.1.0.99"}) {
		t.Fatal("the check changed the cached record's VIPs")
	}
	res, err := merge.Merge(checked)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Spec.IPs, []string{"243.1.0.7"}) {
		t.Fatalf("IPs %v, want east's", res.Spec.IPs)
	}
	if res.Oldest != "attacker" {
		t.Fatalf("the attacker's record still decides the rest of the spec as the oldest; got %s", res.Oldest)
	}

	t.Run("a copy of the VIP its owner's record of the same service holds counts", func(t *testing.T) {
		checked, rejected := c.checkVIPs(holding(t, c, vipExport("east", t0, "243.1.0.7"), vipExport("attacker", t0.Add(time.Minute), "243.1.0.7")))
		if len(rejected) != 0 {
			t.Fatalf("rejected %+v", rejected)
		}
		if !slices.Equal(checked[1].VIPs, []string{"243.1.0.7"}) || !slices.Equal(checked[0].VIPs, []string{"243.1.0.7"}) {
			t.Fatalf("VIPs %v and %v: the owner's and the copy both count", checked[0].VIPs, checked[1].VIPs)
		}
	})
	t.Run("a VIP outlives the cluster that allocated it, until another service holds it too", func(t *testing.T) {
		copied := vipExport("west", t0.Add(time.Minute), "243.1.0.7")
		checked, rejected := c.checkVIPs(holding(t, c, copied))
		if len(rejected) != 0 || !slices.Equal(checked[0].VIPs, []string{"243.1.0.7"}) {
			t.Fatalf("with the allocator gone: VIPs %v, rejected %+v", checked[0].VIPs, rejected)
		}
		steal := vipExport("attacker", t0, "243.1.0.7")
		steal.Name = "steal"
		holding(t, c, copied, steal)
		if _, rejected := c.checkVIPs([]record.Export{copied}); len(rejected) != 1 {
			t.Fatalf("a second service holding the address: the copy must go dark, rejected %+v", rejected)
		}
		if _, rejected := c.checkVIPs([]record.Export{steal}); len(rejected) != 1 {
			t.Fatalf("a second service holding the address must not get it, rejected %+v", rejected)
		}
	})
	t.Run("with no valid VIP the family is missing", func(t *testing.T) {
		checked, _ := c.checkVIPs(holding(t, c, vipExport("attacker", t0, "243.9.0.1")))
		res, _ := merge.Merge(checked)
		if len(res.Spec.IPs) != 0 || len(res.MissingVIPFamilies) != 1 {
			t.Fatalf("IPs %v, missing %v", res.Spec.IPs, res.MissingVIPFamilies)
		}
	})
}

func endpoint(addr string) discoveryv1.Endpoint {
	return discoveryv1.Endpoint{
		Addresses:  []string{addr},
		Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)},
		NodeName:   ptr.To("node-1"),
		Zone:       ptr.To("zone-a"),
		Hostname:   ptr.To("pod-" + strings.ReplaceAll(addr, ".", "-")),
		TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: "kube-system", Name: "coredns"},
		Hints:      &discoveryv1.EndpointHints{ForZones: []discoveryv1.ForZone{{Name: "zone-a"}}},
	}
}

func TestEndpointsOutsideTheirClustersPodCIDRsAreDropped(t *testing.T) {
	c, rec := trustingController(clusterSet, nil, map[string]string{"east": "10.1.0.0/16,fd00:1::/64"})
	si := serviceImport(corev1.IPv4Protocol)
	slice := brokerSlice("east", discoveryv1.AddressTypeIPv4, 0, 8080)
	slice.Endpoints = []discoveryv1.Endpoint{endpoint("10.1.0.5"), endpoint("10.96.0.10"), endpoint("10.1.3.4"), endpoint("192.168.0.1")}

	keep, d := c.endpointFilter("east")
	r, ok := checkEndpoints("east", []*discoveryv1.EndpointSlice{slice}, keep, d)
	if !ok || r.count != 2 || r.reason != ReasonEndpointsOutsidePodCIDRs || !strings.Contains(r.message(), "10.96.0.10") || !strings.Contains(r.message(), "10.1.0.0/16") {
		t.Fatalf("rejection %+v (%s)", r, r.message())
	}
	out := desiredSlices(si, []source{{export: exportOf("east"), slices: []*discoveryv1.EndpointSlice{slice}, keep: keep, remote: true}})
	if len(out) != 1 || !slices.Equal(addresses(out[0]), []string{"10.1.0.5", "10.1.3.4"}) {
		t.Fatalf("imported %v", names(out))
	}

	t.Run("remote endpoints lose nodeName, targetRef and hints, and keep hostname and zone", func(t *testing.T) {
		ep := out[0].Endpoints[0]
		if ep.NodeName != nil || ep.TargetRef != nil || ep.Hints != nil {
			t.Fatalf("kept %+v", ep)
		}
		if ptr.Deref(ep.Zone, "") != "zone-a" || ptr.Deref(ep.Hostname, "") != "pod-10-1-0-5" {
			t.Fatalf("lost zone or hostname: %+v", ep)
		}
		if slice.Endpoints[0].NodeName == nil {
			t.Fatal("the broker slice in the cache was changed")
		}
	})
	t.Run("this cluster's own endpoints keep their nodeName", func(t *testing.T) {
		own := brokerSlice("home", discoveryv1.AddressTypeIPv4, 0, 8080)
		own.Endpoints = []discoveryv1.Endpoint{endpoint("10.9.0.1")}
		out := desiredSlices(si, []source{{export: exportOf("home"), slices: []*discoveryv1.EndpointSlice{own}}})
		if ptr.Deref(out[0].Endpoints[0].NodeName, "") != "node-1" {
			t.Fatalf("lost the nodeName of a local endpoint: %+v", out[0].Endpoints[0])
		}
	})
	t.Run("a cluster without a declaration keeps its endpoints and is said so once", func(t *testing.T) {
		for range 2 {
			keep, d := c.endpointFilter("west")
			if keep != nil || d != nil {
				t.Fatal("an undeclared cluster's endpoints are filtered")
			}
		}
		if n := len(rec.Events); n != 1 {
			t.Fatalf("%d events, want one", n)
		}
		if ev := <-rec.Events; !strings.Contains(ev, EventClusterUndeclared) || !strings.Contains(ev, "west") {
			t.Fatalf("event %q", ev)
		}
	})
}

func TestRejectionsAreToldOnceAndTheConditionSaysThem(t *testing.T) {
	c, _ := trustingController(clusterSet, nil, nil)
	vip := rejection{reason: ReasonClusterSetIPNotOwned, cluster: "attacker", what: "243.1.0.99 is in a block of cluster east", count: 1}
	eps := rejection{reason: ReasonEndpointsOutsidePodCIDRs, cluster: "attacker", what: "declared 10.2.0.0/16; first 10.1.0.5", count: 2}
	ctx := t.Context()
	if fresh := c.noteRejections(ctx, "shop/cart", []rejection{vip}); len(fresh) != 1 {
		t.Fatalf("fresh %v", fresh)
	}
	if fresh := c.noteRejections(ctx, "shop/cart", []rejection{vip}); len(fresh) != 0 {
		t.Fatalf("told twice: %v", fresh)
	}
	if fresh := c.noteRejections(ctx, "shop/cart", []rejection{vip, eps}); len(fresh) != 1 || fresh[0].reason != ReasonEndpointsOutsidePodCIDRs {
		t.Fatalf("fresh %v", fresh)
	}
	cond := rejectedCondition([]rejection{eps, vip}, 3)
	if cond.Status != metav1.ConditionTrue || cond.Reason != "ClusterSetIPNotOwned,EndpointsOutsidePodCIDRs" ||
		!strings.Contains(cond.Message, "cluster attacker: ClusterSetIP 243.1.0.99") || cond.ObservedGeneration != 3 {
		t.Fatalf("condition %+v", cond)
	}
	if cond := rejectedCondition(nil, 3); cond.Status != metav1.ConditionFalse || cond.Reason != ReasonNoneRejected {
		t.Fatalf("condition %+v", cond)
	}
	c.noteRejections(ctx, "shop/cart", nil)
	if fresh := c.noteRejections(ctx, "shop/cart", []rejection{vip}); len(fresh) != 1 {
		t.Fatal("a rejection that went and came back is not told again")
	}
}

func TestACapKeepsEachClustersOldestRecords(t *testing.T) {
	t0 := time.Date(2026, 11, 26, 9, 0, 0, 0, time.UTC)
	key := func(i int) recordKey { return recordKey{created: t0.Add(time.Duration(i) * time.Second), name: "r"} }
	b := newCapBook(3)
	for i := range 3 {
		if now, soon, _ := b.added("east", key(i)); now || soon {
			t.Fatal("a cluster within its cap needs no evaluation")
		}
	}
	if !b.admits("east", key(2)) {
		t.Fatal("a record within the cap is not admitted")
	}
	now, _, _ := b.added("east", key(3))
	if !now {
		t.Fatal("going over the cap needs an evaluation at once")
	}
	_, cut, wasOver, isOver, _, ignored := b.evaluate("east", []recordKey{key(3), key(1), key(0), key(2)})
	if wasOver || !isOver || ignored != 1 || cut != key(2) {
		t.Fatalf("evaluation: cut %v over %v->%v ignored %d", cut, wasOver, isOver, ignored)
	}
	if b.admits("east", key(3)) || !b.admits("east", key(0)) {
		t.Fatal("the newest record must be the one ignored")
	}
	t.Run("a flood of newer records displaces nothing and needs no evaluation", func(t *testing.T) {
		for i := 4; i < 100; i++ {
			if now, soon, ignored := b.added("east", key(i)); now || soon || ignored != i-2 {
				t.Fatalf("record %d: evaluation now %v soon %v, %d ignored", i, now, soon, ignored)
			}
			if b.admits("east", key(i)) {
				t.Fatalf("record %d admitted", i)
			}
		}
		if !b.admits("east", key(1)) {
			t.Fatal("an old record was displaced")
		}
	})
	t.Run("other clusters are not capped by it", func(t *testing.T) {
		b.added("west", key(50))
		if !b.admits("west", key(50)) {
			t.Fatal("another cluster's record is not admitted")
		}
	})
	t.Run("ties in creation time are broken by name", func(t *testing.T) {
		a, z := recordKey{created: t0, name: "a"}, recordKey{created: t0, name: "z"}
		if compareRecordKeys(a, z) >= 0 {
			t.Fatal("names do not break ties")
		}
	})
	t.Run("a deleted old record lets the next one in after reevaluation", func(t *testing.T) {
		if !b.removed("east") {
			t.Fatal("a deletion of an over-cap cluster needs reevaluation")
		}
		keys := []recordKey{key(1), key(2)}
		for i := 3; i < 100; i++ {
			keys = append(keys, key(i))
		}
		_, cut, _, isOver, _, _ := b.evaluate("east", keys)
		if !isOver || cut != key(3) || !b.admits("east", key(3)) {
			t.Fatalf("cut %v", cut)
		}
	})
	t.Run("back within the cap everything counts", func(t *testing.T) {
		_, _, wasOver, isOver, _, ignored := b.evaluate("east", []recordKey{key(1)})
		if !wasOver || isOver || ignored != 0 || !b.admits("east", key(99)) {
			t.Fatalf("over %v->%v ignored %d", wasOver, isOver, ignored)
		}
	})
}

// BenchmarkCapOfAFlood is the cost of computing the cut of a cluster that
// floods the broker with 100,000 records against the default cap: done at
// most once a second per cluster.
func BenchmarkCapOfAFlood(b *testing.B) {
	t0 := time.Date(2026, 11, 26, 9, 0, 0, 0, time.UTC)
	keys := make([]recordKey, 100000)
	for i := range keys {
		keys[i] = recordKey{created: t0.Add(time.Duration(i%5000) * time.Second), name: "r" + strconv.Itoa(i)}
	}
	book := newCapBook(DefaultMaxServicesPerCluster)
	b.ResetTimer()
	for range b.N {
		in := slices.Clone(keys)
		book.evaluate("flood", in)
	}
}

// staticLiveness is liveness where every cluster is live and the broker
// answers.
type staticLiveness struct{}

func (staticLiveness) Live(string) bool                       { return true }
func (staticLiveness) Pinned(string) bool                     { return true }
func (staticLiveness) BrokerDown() (time.Time, bool)          { return time.Time{}, false }
func (staticLiveness) OnTransition(func(liveness.Transition)) {}
func (staticLiveness) HasSynced() bool                        { return true }
func (staticLiveness) Object() *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: liveness.DefaultNamespace, Name: liveness.ConfigMapName}}
}
