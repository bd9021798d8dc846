package importer_test

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/mcsd-io/mcsd/broker"
	"github.com/mcsd-io/mcsd/importer"
	"github.com/mcsd-io/mcsd/internal/record"
	"github.com/mcsd-io/mcsd/liveness"
	"github.com/mcsd-io/mcsd/test/lib/fixture"
	"github.com/mcsd-io/mcsd/test/lib/harness"
	"github.com/mcsd-io/mcsd/vipalloc"
)

// remote is a cluster the test plays on the broker: its records, slices,
// claims and Lease are written with the broker administrator's clients, as
// a compromised member (or one the admission policy let through) could
// write them.
type remote struct {
	e  *env
	id string

	mu    sync.Mutex
	renew context.CancelFunc
}

func (e *env) remote(id string) *remote { return &remote{e: e, id: id} }

// claim writes the cluster's ClusterSetIP block claim.
func (r *remote) claim(block string) {
	r.e.t.Helper()
	p := netip.MustParsePrefix(block)
	family := corev1.IPv4Protocol
	if p.Addr().Is6() {
		family = corev1.IPv6Protocol
	}
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{
			Name:   vipalloc.ClaimName(r.id, family),
			Labels: map[string]string{vipalloc.LabelClaim: "", mcsv1beta1.LabelSourceCluster: r.id},
		},
		Data: map[string]string{vipalloc.ClaimKey: p.String()},
	}
	if _, err := r.e.cs.Broker.Kube.CoreV1().ConfigMaps(broker.DefaultNamespace).Create(r.e.ctx, cm, metav1.CreateOptions{}); err != nil {
		r.e.t.Fatal(err)
	}
}

// declare writes the cluster's member declaration, as the broker's
// administrator does.
func (r *remote) declare(podCIDRs ...string) {
	r.e.t.Helper()
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{
			Name:   broker.DeclarationName(r.id),
			Labels: map[string]string{broker.LabelDeclaration: "", mcsv1beta1.LabelSourceCluster: r.id},
		},
		Data: map[string]string{broker.DeclarationPodCIDRsKey: strings.Join(podCIDRs, ",")},
	}
	if _, err := r.e.cs.Broker.Kube.CoreV1().ConfigMaps(broker.DefaultNamespace).Create(r.e.ctx, cm, metav1.CreateOptions{}); err != nil {
		r.e.t.Fatal(err)
	}
}

type exported struct {
	ns, name string
	// declared is the export creation time the record declares (default
	// now).
	declared time.Time
	headless bool
	vips     []string
	labels   map[string]string
	// extraPort, when set, is a second TCP port "extra".
	extraPort int32
	// endpoints: addresses of ready endpoints, each with a nodeName and a
	// targetRef.
	endpoints []string
}

// export writes the cluster's record of a service and its EndpointSlice.
func (r *remote) export(x exported) {
	r.e.t.Helper()
	if x.declared.IsZero() {
		x.declared = time.Now()
	}
	ex := record.Export{
		Cluster: r.id, Namespace: x.ns, Name: x.name, Created: metav1.NewTime(x.declared.UTC().Truncate(time.Second)),
		Type:           mcsv1beta1.ClusterSetIP,
		Ports:          []mcsv1beta1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}},
		IPFamilies:     []corev1.IPFamily{corev1.IPv4Protocol},
		VIPs:           x.vips,
		ExportedLabels: x.labels,
	}
	if x.headless {
		ex.Type, ex.VIPs = mcsv1beta1.Headless, nil
	}
	if x.extraPort != 0 {
		ex.Ports = append(ex.Ports, mcsv1beta1.ServicePort{Name: "extra", Protocol: corev1.ProtocolTCP, Port: x.extraPort})
	}
	own, err := fixture.CreateMemberNamespace(r.e.ctx, r.e.cs.Broker.Kube, r.id)
	if err != nil {
		r.e.t.Fatal(err)
	}
	obj := record.Encode(ex)
	obj.Namespace = own
	if _, err := r.e.cs.Broker.MCS.MulticlusterV1beta1().ServiceImports(own).Create(r.e.ctx, obj, metav1.CreateOptions{}); err != nil {
		r.e.t.Fatal(err)
	}
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name:   record.EndpointSliceName(r.id, x.ns, x.name, discoveryv1.AddressTypeIPv4, 0),
			Labels: record.EndpointSliceLabels(r.id, x.ns, x.name),
		},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To[int32](8080)}},
	}
	for _, a := range x.endpoints {
		slice.Endpoints = append(slice.Endpoints, discoveryv1.Endpoint{
			Addresses:  []string{a},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)},
			NodeName:   ptr.To("node-of-" + r.id),
			Zone:       ptr.To("zone-a"),
			TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: "kube-system", Name: "coredns-0"},
		})
	}
	if _, err := r.e.cs.Broker.Kube.DiscoveryV1().EndpointSlices(own).Create(r.e.ctx, slice, metav1.CreateOptions{}); err != nil {
		r.e.t.Fatal(err)
	}
}

// unexport deletes the cluster's record of a service.
func (r *remote) unexport(ns, name string) {
	r.e.t.Helper()
	err := r.e.cs.Broker.MCS.MulticlusterV1beta1().ServiceImports(record.MemberNamespace(broker.DefaultNamespace, r.id)).Delete(r.e.ctx, record.Name(r.id, ns, name), metav1.DeleteOptions{})
	if err != nil {
		r.e.t.Fatal(err)
	}
}

// beat renews the cluster's Lease every 500 ms until stop; renewTime is
// the test's clock.
func (r *remote) beat() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.renew != nil {
		return
	}
	ctx, cancel := context.WithCancel(r.e.ctx)
	r.renew = cancel
	fake := fixture.FakeExporter{Cluster: r.id, Kube: r.e.cs.Broker.Kube, MCS: r.e.cs.Broker.MCS}
	go wait.UntilWithContext(ctx, func(ctx context.Context) { _ = fake.Renew(ctx) }, 500*time.Millisecond)
}

// stop stops renewing the Lease: the cluster dies.
func (r *remote) stop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.renew != nil {
		r.renew()
		r.renew = nil
	}
}

func rejectedCond(si *mcsv1beta1.ServiceImport) *metav1.Condition {
	return meta.FindStatusCondition(si.Status.Conditions, importer.ConditionRejected)
}

// TestImporterDefendsAgainstAMember plays compromised members on a real
// broker against a real member cluster's importer: each of the importer's
// checks, and that the honest members' imports keep working meanwhile.
func TestImporterDefendsAgainstAMember(t *testing.T) {
	cs := harness.Start(t, harness.Options{Clusters: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	members := fixture.Join(t, cs)
	home := members[0]
	e := &env{t: t, root: t, ctx: ctx, cs: cs, members: members,
		exporters: map[string]*fixture.Exporter{}, importers: map[string]*fixture.Importer{}}
	const (
		grace      = 12 * time.Second
		maxRecords = 8
	)
	opts := fixture.ImporterOptions{
		ClusterTTL:            clusterTTL,
		ClusterSetCIDRs:       []netip.Prefix{vipalloc.DefaultClusterSetCIDRv4, vipalloc.DefaultClusterSetCIDRv6},
		MaxServicesPerCluster: maxRecords,
		GoneClusterGrace:      grace,
	}
	start := func(opts fixture.ImporterOptions) *fixture.Importer {
		e.importers[home.ID] = fixture.StartImporter(t, home, opts)
		return e.importers[home.ID]
	}
	e.namespace("app", home)
	// What the broker's administrator and the claims say is there before
	// the importer starts, so it judges every record by it from the first.
	east, attacker := e.remote("east"), e.remote("attacker")
	east.claim("243.1.0.0/16")
	attacker.claim("243.2.0.0/16")
	east.declare("10.1.0.0/16")
	east.beat()
	attacker.beat()
	imp := start(opts)
	const minute = time.Minute

	t.Run("a VIP of another cluster's block is ignored and said so, and the owner's VIP is used", func(t *testing.T) {
		e.t = t
		east.export(exported{ns: "app", name: "web", vips: []string{"243.1.0.10"}, endpoints: []string{"10.1.0.5"}})
		// The attacker exports a service of its own with the victim's VIP.
		attacker.export(exported{ns: "app", name: "grab", vips: []string{"243.1.0.10"}, endpoints: []string{"10.2.0.5"}})
		e.imported(home, "app", "web", minute, "with east's VIP", func(si *mcsv1beta1.ServiceImport) bool {
			return slices.Equal(si.Spec.IPs, []string{"243.1.0.10"}) && rejectedCond(si) == nil
		})
		si := e.imported(home, "app", "grab", minute, "without the stolen VIP and saying so", func(si *mcsv1beta1.ServiceImport) bool {
			c := rejectedCond(si)
			return len(si.Spec.IPs) == 0 && c != nil && c.Status == metav1.ConditionTrue && c.Reason == importer.ReasonClusterSetIPNotOwned
		})
		if msg := rejectedCond(si).Message; !strings.Contains(msg, "attacker") || !strings.Contains(msg, "243.1.0.10") || !strings.Contains(msg, "east") {
			t.Fatalf("the condition does not name the cluster, the address and its owner: %q", msg)
		}
		if !readyIs(si, metav1.ConditionFalse, "Pending") {
			t.Fatalf("a service without a valid VIP is ready: %s", dump(si))
		}
		ev := e.event(home, "app", "grab", importer.ReasonClusterSetIPNotOwned)
		if ev.Type != corev1.EventTypeWarning || !strings.Contains(ev.Message, "243.1.0.10") {
			t.Fatalf("event %+v", ev)
		}
		if n := metricValue(imp.Registry, "mcsd_importer_rejected_clustersetips_total", map[string]string{"reason": importer.ReasonClusterSetIPNotOwned}); n != 1 {
			t.Fatalf("rejected VIPs counted %v, want 1", n)
		}
	})

	t.Run("a VIP outside the clusterset ranges is ignored", func(t *testing.T) {
		e.t = t
		attacker.export(exported{ns: "app", name: "dns", vips: []string{"10.96.0.10"}})
		e.imported(home, "app", "dns", minute, "without the VIP", func(si *mcsv1beta1.ServiceImport) bool {
			c := rejectedCond(si)
			return len(si.Spec.IPs) == 0 && c != nil && c.Reason == importer.ReasonClusterSetIPOutsideRange && strings.Contains(c.Message, "10.96.0.10")
		})
	})

	t.Run("a VIP counts once its cluster's claim of the block appears", func(t *testing.T) {
		e.t = t
		late := e.remote("late")
		late.beat()
		late.export(exported{ns: "app", name: "late", vips: []string{"243.3.0.5"}})
		e.imported(home, "app", "late", minute, "without the unclaimed VIP", func(si *mcsv1beta1.ServiceImport) bool {
			c := rejectedCond(si)
			return len(si.Spec.IPs) == 0 && c != nil && strings.Contains(c.Message, "in no claimed block")
		})
		late.claim("243.3.0.0/16")
		e.imported(home, "app", "late", minute, "with its VIP and nothing rejected", func(si *mcsv1beta1.ServiceImport) bool {
			return slices.Equal(si.Spec.IPs, []string{"243.3.0.5"}) && rejectedCond(si) == nil && readyIs(si, metav1.ConditionTrue, "Ready")
		})
	})

	t.Run("a forged old export time does not win precedence", func(t *testing.T) {
		e.t = t
		east.export(exported{ns: "app", name: "shop", vips: []string{"243.1.0.11"}, labels: map[string]string{"owner": "east"}})
		e.imported(home, "app", "shop", minute, "from east", func(si *mcsv1beta1.ServiceImport) bool {
			return slices.Equal(si.Spec.IPs, []string{"243.1.0.11"})
		})
		// Within the second the broker stored east's record, the tie would
		// be broken by cluster ID (docs/broker-records.md): store the
		// attacker's in a later second, as a record written in reaction to
		// east's usually is.
		e.afterStored("app", "shop")
		// Declared a year old, stored now: it counts from now, after east.
		// Its own VIP and its labels would be the service's if it won.
		attacker.export(exported{ns: "app", name: "shop", declared: time.Now().Add(-365 * 24 * time.Hour), vips: []string{"243.2.0.11"},
			labels: map[string]string{"owner": "attacker"}, extraPort: 9999})
		si := e.imported(home, "app", "shop", minute, "with the attacker's port in the union", func(si *mcsv1beta1.ServiceImport) bool {
			return len(si.Spec.Ports) == 2
		})
		if !slices.Equal(si.Spec.IPs, []string{"243.1.0.11"}) || si.Labels["owner"] != "east" {
			t.Fatalf("the forged record took precedence: %s", dump(si))
		}
	})

	t.Run("endpoints outside their cluster's pod CIDRs are dropped, and remote endpoints lose nodeName and targetRef", func(t *testing.T) {
		e.t = t
		east.export(exported{ns: "app", name: "api", vips: []string{"243.1.0.12"}, endpoints: []string{"10.1.0.7", "10.244.0.9"}})
		items := e.endpointsBySource(home, "app", "api", minute, map[string][]string{"east": {"10.1.0.7"}})
		ep := items[0].Endpoints[0]
		if ep.NodeName != nil || ep.TargetRef != nil {
			t.Fatalf("a remote endpoint kept its nodeName or targetRef: %+v", ep)
		}
		if ptr.Deref(ep.Zone, "") != "zone-a" {
			t.Fatalf("the zone was dropped: %+v", ep)
		}
		si := e.imported(home, "app", "api", minute, "saying endpoints were dropped", func(si *mcsv1beta1.ServiceImport) bool {
			c := rejectedCond(si)
			return c != nil && c.Reason == importer.ReasonEndpointsOutsidePodCIDRs
		})
		if msg := rejectedCond(si).Message; !strings.Contains(msg, "east") || !strings.Contains(msg, "10.244.0.9") || !strings.Contains(msg, "10.1.0.0/16") {
			t.Fatalf("condition message %q", msg)
		}
		e.event(home, "app", "api", importer.ReasonEndpointsOutsidePodCIDRs)
		if n := metricValue(imp.Registry, "mcsd_importer_dropped_endpoints_total", map[string]string{"reason": importer.ReasonEndpointsOutsidePodCIDRs}); n != 1 {
			t.Fatalf("dropped endpoints counted %v, want 1", n)
		}
		// The attacker has no declaration: its endpoints are kept, and
		// that is said once.
		e.endpointsBySource(home, "app", "grab", minute, map[string][]string{"attacker": {"10.2.0.5"}})
		e.livenessEvent(home, importer.EventClusterUndeclared)
		if n := metricValue(imp.Registry, "mcsd_importer_clusters_without_declaration", nil); n < 1 {
			t.Fatalf("clusters without declaration %v", n)
		}
	})

	t.Run("services of a denied namespace are never imported", func(t *testing.T) {
		e.t = t
		attacker.export(exported{ns: "kube-system", name: "kube-dns", vips: []string{"243.2.0.53"}, endpoints: []string{"10.2.0.53"}})
		err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, minute, true, func(context.Context) (bool, error) {
			return metricValue(imp.Registry, "mcsd_importer_ignored_records_total", map[string]string{"reason": importer.ReasonNamespaceDenied}) == 1, nil
		})
		if err != nil {
			t.Fatal("the denied record was not counted")
		}
		// A later service is imported: the denied one had its turn.
		east.export(exported{ns: "app", name: "after-denied", vips: []string{"243.1.0.13"}})
		e.imported(home, "app", "after-denied", minute, "imported", func(*mcsv1beta1.ServiceImport) bool { return true })
		if _, err := home.MCS.MulticlusterV1beta1().ServiceImports("kube-system").Get(ctx, "kube-dns", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Fatalf("a ServiceImport in kube-system: %v", err)
		}
		if got := e.slices(home, "kube-system", "kube-dns"); len(got) != 0 {
			t.Fatalf("slices in kube-system: %v", got)
		}
	})

	t.Run("default/kubernetes and mcsd's own namespace are never imported", func(t *testing.T) {
		e.t = t
		e.namespace(liveness.DefaultNamespace, home)
		before := metricValue(imp.Registry, "mcsd_importer_ignored_records_total", map[string]string{"reason": importer.ReasonNamespaceDenied})
		attacker.export(exported{ns: "default", name: "kubernetes", vips: []string{"243.2.0.1"}})
		attacker.export(exported{ns: liveness.DefaultNamespace, name: "mcsd-dns", vips: []string{"243.2.0.2"}})
		err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, minute, true, func(context.Context) (bool, error) {
			return metricValue(imp.Registry, "mcsd_importer_ignored_records_total", map[string]string{"reason": importer.ReasonNamespaceDenied}) == before+2, nil
		})
		if err != nil {
			t.Fatal("the denied records were not counted")
		}
		east.export(exported{ns: "app", name: "after-kubernetes", vips: []string{"243.1.0.16"}})
		e.imported(home, "app", "after-kubernetes", minute, "imported", func(*mcsv1beta1.ServiceImport) bool { return true })
		for _, key := range [][2]string{{"default", "kubernetes"}, {liveness.DefaultNamespace, "mcsd-dns"}} {
			if _, err := home.MCS.MulticlusterV1beta1().ServiceImports(key[0]).Get(ctx, key[1], metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				t.Fatalf("a ServiceImport %s/%s: %v", key[0], key[1], err)
			}
		}
	})

	t.Run("a record being deleted counts as gone, whatever holds it", func(t *testing.T) {
		e.t = t
		rogue := e.remote("rogue")
		rogue.claim("243.8.0.0/16")
		rogue.beat()
		rogue.export(exported{ns: "app", name: "held", vips: []string{"243.8.0.1"}})
		e.imported(home, "app", "held", minute, "imported", func(*mcsv1beta1.ServiceImport) bool { return true })
		// A finalizer from before the broker refused them (only an
		// administrator can still set one), then a delete.
		records := cs.Broker.MCS.MulticlusterV1beta1().ServiceImports(record.MemberNamespace(broker.DefaultNamespace, "rogue"))
		si, err := records.Get(ctx, record.Name("rogue", "app", "held"), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		si.Finalizers = []string{"example.com/keep"}
		if _, err := records.Update(ctx, si, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		rogue.unexport("app", "held")
		e.gone(home, "app", "held", minute)
		si, err = records.Get(ctx, si.Name, metav1.GetOptions{})
		if err != nil || si.DeletionTimestamp == nil {
			t.Fatalf("the record is not held: %v", err)
		}
		si.Finalizers = nil
		if _, err := records.Update(ctx, si, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("export rules leave out the records of clusters they keep out, and say so", func(t *testing.T) {
		e.t = t
		east.export(exported{ns: "app", name: "ruled", vips: []string{"243.1.0.17"}, endpoints: []string{"10.1.0.17"}})
		e.imported(home, "app", "ruled", minute, "from east", func(si *mcsv1beta1.ServiceImport) bool { return len(si.Status.Clusters) == 1 })
		e.afterStored("app", "ruled")
		squatter := e.remote("squatter")
		squatter.claim("243.9.0.0/16")
		squatter.beat()
		squatter.export(exported{ns: "app", name: "ruled", headless: true, endpoints: []string{"10.9.0.17"}})
		squatter.export(exported{ns: "app", name: "squatted", vips: []string{"243.9.0.17"}})
		e.imported(home, "app", "ruled", minute, "with the squatter too, in conflict", func(si *mcsv1beta1.ServiceImport) bool {
			return len(si.Status.Clusters) == 1 && si.Spec.Type == mcsv1beta1.ClusterSetIP
		})
		e.imported(home, "app", "squatted", minute, "from the squatter", func(*mcsv1beta1.ServiceImport) bool { return true })
		rule := broker.ExportRule{Name: "app", Namespaces: []string{"app"}, Members: []string{"east", "late", "rogue"}}
		if err := broker.SetExportRule(ctx, cs.Broker.Config, broker.DefaultNamespace, rule); err != nil {
			t.Fatal(err)
		}
		si := e.imported(home, "app", "ruled", minute, "saying the squatter's record is left out", func(si *mcsv1beta1.ServiceImport) bool {
			c := rejectedCond(si)
			return c != nil && c.Reason == importer.ReasonExportNotAllowed && len(si.Status.Clusters) == 1 && si.Status.Clusters[0].Cluster == "east"
		})
		if msg := rejectedCond(si).Message; !strings.Contains(msg, "squatter") || !strings.Contains(msg, "export rule app") {
			t.Fatalf("condition message %q", msg)
		}
		e.event(home, "app", "ruled", importer.ReasonExportNotAllowed)
		e.gone(home, "app", "squatted", minute)
		if n := metricValue(imp.Registry, "mcsd_importer_ignored_records_total", map[string]string{"reason": importer.ReasonExportNotAllowed}); n < 2 {
			t.Fatalf("records left out by export rules counted %v, want 2 at least", n)
		}
		if err := broker.DeleteExportRule(ctx, cs.Broker.Kube, broker.DefaultNamespace, "app"); err != nil {
			t.Fatal(err)
		}
		e.imported(home, "app", "squatted", minute, "back once the rule went", func(*mcsv1beta1.ServiceImport) bool { return true })
	})

	t.Run("an importer that allows the namespace imports it, and one that denies it removes it", func(t *testing.T) {
		e.t = t
		imp.Stop()
		open := opts
		open.DeniedNamespaces = []string{}
		imp = start(open)
		e.imported(home, "kube-system", "kube-dns", minute, "imported where allowed", func(*mcsv1beta1.ServiceImport) bool { return true })
		imp.Stop()
		imp = start(opts)
		e.gone(home, "kube-system", "kube-dns", minute)
	})

	t.Run("a cluster beyond its cap of records has its newest ignored, and others keep importing", func(t *testing.T) {
		e.t = t
		flood := e.remote("flood")
		flood.claim("243.5.0.0/16")
		flood.beat()
		for i := range maxRecords + 2 {
			flood.export(exported{ns: "app", name: fmt.Sprintf("flood-%d", i), vips: []string{fmt.Sprintf("243.5.0.%d", i+1)}})
		}
		// The oldest by the broker's creationTimestamp, then name, are kept.
		list, err := cs.Broker.MCS.MulticlusterV1beta1().ServiceImports(metav1.NamespaceAll).List(ctx, metav1.ListOptions{LabelSelector: mcsv1beta1.LabelSourceCluster + "=flood"})
		if err != nil {
			t.Fatal(err)
		}
		recs := list.Items
		slices.SortFunc(recs, func(a, b mcsv1beta1.ServiceImport) int {
			if c := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); c != 0 {
				return c
			}
			return strings.Compare(a.Name, b.Name)
		})
		service := func(r mcsv1beta1.ServiceImport) string { return r.Labels[mcsv1beta1.LabelServiceName] }
		for _, r := range recs[:maxRecords] {
			e.imported(home, "app", service(r), minute, "imported", func(*mcsv1beta1.ServiceImport) bool { return true })
		}
		ev := e.livenessEvent(home, importer.EventClusterOverServiceCap)
		if !strings.Contains(ev.Message, "flood") {
			t.Fatalf("event %q", ev.Message)
		}
		east.export(exported{ns: "app", name: "during-flood", vips: []string{"243.1.0.14"}})
		e.imported(home, "app", "during-flood", minute, "imported while another cluster floods", func(*mcsv1beta1.ServiceImport) bool { return true })
		for _, r := range recs[maxRecords:] {
			if _, err := home.MCS.MulticlusterV1beta1().ServiceImports("app").Get(ctx, service(r), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				t.Fatalf("%s beyond the cap was imported: %v", service(r), err)
			}
		}
		if n := metricValue(imp.Registry, "mcsd_importer_records_over_cap", map[string]string{"cluster": "flood"}); n != 2 {
			t.Fatalf("records over the cap %v, want 2", n)
		}
		// An old record goes: the next one counts.
		flood.unexport("app", service(recs[0]))
		e.gone(home, "app", service(recs[0]), minute)
		e.imported(home, "app", service(recs[maxRecords]), minute, "imported once an older record went", func(*mcsv1beta1.ServiceImport) bool { return true })
	})

	t.Run("a cluster dead before the importer restarts does not come back", func(t *testing.T) {
		e.t = t
		old := e.remote("old")
		old.beat()
		old.declare("10.7.0.0/16")
		old.export(exported{ns: "app", name: "ghost", headless: true, endpoints: []string{"10.7.0.1"}})
		e.endpointsBySource(home, "app", "ghost", minute, map[string][]string{"old": {"10.7.0.1"}})
		old.stop()
		e.liveness(home, minute, "saying old is gone", func(s liveness.State) bool { return s.Clusters["old"] == liveness.Gone })
		e.endpointsBySource(home, "app", "ghost", minute, map[string][]string{})
		// Dead by its own renewTime too, allowing for the clock skew.
		lease, err := cs.Broker.Kube.CoordinationV1().Leases(record.MemberNamespace(broker.DefaultNamespace, "old")).Get(ctx, record.LeaseName("old"), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		deadline := lease.Spec.RenewTime.Add(clusterTTL + liveness.DefaultClockSkew)
		if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, minute, true, func(context.Context) (bool, error) {
			return time.Now().After(deadline), nil
		}); err != nil {
			t.Fatal(err)
		}
		imp.Stop()
		imp = start(opts)
		// The restarted importer has synced every service; had it taken
		// the Lease's first sight for a renewal, old would be live for a
		// TTL now and its endpoints back.
		services := e.brokerServices()
		if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, minute, true, func(context.Context) (bool, error) {
			return e.successfulSyncs(home) >= float64(services), nil
		}); err != nil {
			t.Fatalf("the new importer did not sync the %d services", services)
		}
		state := e.liveness(home, minute, "published by the new importer", func(s liveness.State) bool { return s.Clusters["old"] != "" })
		if state.Clusters["old"] != liveness.Gone {
			t.Fatalf("old is %s after the restart", state.Clusters["old"])
		}
		if got, _ := e.bySource(home, "app", "ghost"); len(got["old"]) != 0 {
			t.Fatalf("old's endpoints are back: %v", got)
		}
	})

	t.Run("the records of a cluster gone past the grace stop deciding the service, until it renews", func(t *testing.T) {
		e.t = t
		gone := e.remote("gone")
		gone.claim("243.6.0.0/16")
		gone.beat()
		gone.export(exported{ns: "app", name: "shared", headless: true})
		e.imported(home, "app", "shared", minute, "headless", func(si *mcsv1beta1.ServiceImport) bool { return si.Spec.Type == mcsv1beta1.Headless })
		e.afterStored("app", "shared")
		east.export(exported{ns: "app", name: "shared", vips: []string{"243.1.0.15"}})
		e.imported(home, "app", "shared", minute, "still headless: gone's record is the oldest", func(si *mcsv1beta1.ServiceImport) bool {
			return si.Spec.Type == mcsv1beta1.Headless
		})
		gone.stop()
		died := time.Now()
		// The spec and the status are written one after the other: wait
		// for both.
		e.imported(home, "app", "shared", clusterTTL+grace+minute, "taken over by east, and ready", func(si *mcsv1beta1.ServiceImport) bool {
			return si.Spec.Type == mcsv1beta1.ClusterSetIP && slices.Equal(si.Spec.IPs, []string{"243.1.0.15"}) && readyIs(si, metav1.ConditionTrue, "Ready")
		})
		if took := time.Since(died); took < grace {
			t.Fatalf("east took over %v after gone died, before the grace of %v", took, grace)
		}
		e.livenessEvent(home, liveness.EventClusterGonePastGrace)
		if n := metricValue(imp.Registry, "mcsd_importer_ignored_records_total", map[string]string{"reason": importer.ReasonClusterGonePastGrace}); n < 1 {
			t.Fatalf("ignored records of gone clusters counted %v", n)
		}
		gone.beat()
		e.imported(home, "app", "shared", minute, "headless again once gone renews", func(si *mcsv1beta1.ServiceImport) bool {
			return si.Spec.Type == mcsv1beta1.Headless
		})
	})

	t.Run("the honest cluster's first import still stands", func(t *testing.T) {
		e.t = t
		e.endpointsBySource(home, "app", "web", minute, map[string][]string{"east": {"10.1.0.5"}})
		si := e.imported(home, "app", "web", minute, "with east's VIP", func(si *mcsv1beta1.ServiceImport) bool {
			return slices.Equal(si.Spec.IPs, []string{"243.1.0.10"})
		})
		if got := clustersOf(si); !slices.Equal(got, []string{"east"}) {
			t.Fatalf("clusters %v", got)
		}
	})
}

// brokerRecords lists the broker's records of a service.
func (e *env) brokerRecords(ns, name string) []mcsv1beta1.ServiceImport {
	e.t.Helper()
	list, err := e.cs.Broker.MCS.MulticlusterV1beta1().ServiceImports(metav1.NamespaceAll).List(e.ctx, metav1.ListOptions{LabelSelector: record.ServiceSelector(ns, name).String()})
	if err != nil {
		e.t.Fatal(err)
	}
	return list.Items
}

// afterStored waits until the second in which the broker stored the last
// record of a service has passed, so that a record written now is stored
// later (the broker's timestamps are to the second; within one, precedence
// ties are broken by cluster ID).
func (e *env) afterStored(ns, name string) {
	e.t.Helper()
	var last time.Time
	for _, r := range e.brokerRecords(ns, name) {
		if r.CreationTimestamp.After(last) {
			last = r.CreationTimestamp.Time
		}
	}
	if err := wait.PollUntilContextTimeout(e.ctx, 50*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return time.Now().After(last.Add(time.Second)), nil
	}); err != nil {
		e.t.Fatal(err)
	}
}

// brokerServices is the number of services with records on the broker.
func (e *env) brokerServices() int {
	e.t.Helper()
	list, err := e.cs.Broker.MCS.MulticlusterV1beta1().ServiceImports(metav1.NamespaceAll).List(e.ctx, metav1.ListOptions{LabelSelector: record.LabelServiceNamespace})
	if err != nil {
		e.t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, r := range list.Items {
		seen[r.Labels[record.LabelServiceNamespace]+"/"+r.Labels[mcsv1beta1.LabelServiceName]] = true
	}
	return len(seen)
}
