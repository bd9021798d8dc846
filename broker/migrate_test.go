package broker_test

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/mcsd-io/mcsd/broker"
	"github.com/mcsd-io/mcsd/internal/record"
	"github.com/mcsd-io/mcsd/test/lib/fixture"
	"github.com/mcsd-io/mcsd/test/lib/harness"
	"github.com/mcsd-io/mcsd/vipalloc"
)

// TestMigrateMovesTheSharedLayout: a broker of the shared layout, where
// west exported shop/cart with a ClusterSetIP before east exported it as
// Headless, is migrated; the records move to the members' namespaces
// (east's first, in name order, so that without the kept time east would
// now be the older), and an importer of this version still makes shop/cart
// west's: ClusterSetIP, with west's VIP.
func TestMigrateMovesTheSharedLayout(t *testing.T) {
	cs := harness.Start(t, harness.Options{Clusters: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	b := cs.Broker
	importing := fixture.Join(t, cs)[0]
	tokens := map[string]string{}
	for i, id := range []string{"east", "west"} {
		token, err := broker.AddMember(ctx, b.Kube, ns, id, broker.MemberOptions{PodCIDRs: []netip.Prefix{netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(20 + i), 0, 0}), 16)}})
		if err != nil {
			t.Fatal(err)
		}
		tokens[id] = token
	}
	westBlock, err := vipalloc.Claimer{Kube: kubernetes.NewForConfigOrDie(b.TokenConfig(tokens["west"])), Namespace: ns, ClusterID: "west"}.
		Claim(ctx, vipalloc.DefaultClusterSetCIDRv4, netip.Prefix{}, vipalloc.DefaultBlockBitsV4)
	if err != nil {
		t.Fatal(err)
	}
	vip := westBlock.Addr().Next().String()

	// The shared layout: what an older mcsd wrote to the broker namespace,
	// and its quota there.
	if _, err := b.Kube.CoreV1().ResourceQuotas(ns).Create(ctx, &corev1.ResourceQuota{
		ObjectMeta: metav1.ObjectMeta{Name: "mcsd-broker"},
		Spec:       corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{"count/configmaps": resource.MustParse("3")}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	legacy := func(id string, typ mcsv1beta1.ServiceImportType, addr string) *mcsv1beta1.ServiceImport {
		t.Helper()
		e := record.Export{
			Cluster: id, Namespace: "shop", Name: "cart", Created: metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)),
			Type: typ, Ports: []mcsv1beta1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}},
			IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol},
		}
		if typ == mcsv1beta1.ClusterSetIP {
			e.VIPs = []string{vip}
		}
		si := record.Encode(e)
		si.Namespace = ns
		si, err := b.MCS.MulticlusterV1beta1().ServiceImports(ns).Create(ctx, si, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		s := slice(id, "cart", discoveryv1.AddressTypeIPv4, addr)
		s.Namespace = ns
		s.Name = record.EndpointSliceName(id, "shop", "cart", discoveryv1.AddressTypeIPv4, 0)
		if _, err := b.Kube.DiscoveryV1().EndpointSlices(ns).Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := b.Kube.CoordinationV1().Leases(ns).Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: record.LeaseName(id), Labels: record.LeaseLabels(id)},
			Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To(id), LeaseDurationSeconds: ptr.To[int32](10), RenewTime: ptr.To(metav1.NowMicro())},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		return si
	}
	west := legacy("west", mcsv1beta1.ClusterSetIP, "10.21.0.5")
	// east's record a second later, as the broker's timestamps count.
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		return time.Now().UTC().Truncate(time.Second).After(west.CreationTimestamp.Time), nil
	}); err != nil {
		t.Fatal(err)
	}
	legacy("east", mcsv1beta1.Headless, "10.20.0.5")
	ghost := record.Encode(record.Export{Cluster: "ghost", Namespace: "shop", Name: "cart", Created: metav1.Now(), Type: mcsv1beta1.Headless, Ports: []mcsv1beta1.ServicePort{}, IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol}})
	if _, err := b.MCS.MulticlusterV1beta1().ServiceImports(ns).Create(ctx, ghost, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	moved, err := broker.Migrate(ctx, b.Config, broker.Settings{})
	if err == nil || !strings.Contains(err.Error(), "no members") || !strings.Contains(err.Error(), "ghost") {
		t.Fatalf("migrating with a record of a cluster that is no member: %v", err)
	}
	for _, id := range []string{"east", "west"} {
		if m := moved[id]; m != (broker.Moved{Records: 1, EndpointSlices: 1, Leases: 1}) {
			t.Errorf("moved of %s: %+v", id, m)
		}
	}
	t.Logf("moved %+v; %v", moved, err)
	left, err := b.MCS.MulticlusterV1beta1().ServiceImports(ns).List(ctx, metav1.ListOptions{LabelSelector: record.LabelSourceCluster})
	if err != nil || len(left.Items) != 1 || left.Items[0].Labels[record.LabelSourceCluster] != "ghost" {
		t.Fatalf("records left in the broker namespace: %v, %v", left, err)
	}
	if _, err := b.Kube.CoreV1().ResourceQuotas(ns).Get(ctx, "mcsd-broker", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the shared layout's quota: %v, want it gone", err)
	}
	westNS := record.MemberNamespace(ns, "west")
	got, err := b.MCS.MulticlusterV1beta1().ServiceImports(westNS).Get(ctx, west.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if p := record.Precedence(got); !p.Equal(&west.CreationTimestamp) || got.CreationTimestamp.Equal(&west.CreationTimestamp) {
		t.Errorf("west's moved record counts from %v (created %v), want %v", p, got.CreationTimestamp, west.CreationTimestamp)
	}
	// Running it again moves nothing more and harms nothing.
	if again, _ := broker.Migrate(ctx, b.Config, broker.Settings{}); len(again) != 0 {
		t.Errorf("migrating again moved %v", again)
	}

	// The members run this version: their heartbeats in their namespaces,
	// an importer that reads there.
	for _, id := range []string{"east", "west"} {
		fake := fixture.FakeExporter{Cluster: id, Kube: b.Kube, MCS: b.MCS}
		go wait.UntilWithContext(ctx, func(ctx context.Context) { _ = fake.Renew(ctx) }, time.Second)
	}
	if _, err := importing.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	fixture.StartImporter(t, importing, fixture.ImporterOptions{})
	var si *mcsv1beta1.ServiceImport
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		si, err = importing.MCS.MulticlusterV1beta1().ServiceImports("shop").Get(ctx, "cart", metav1.GetOptions{})
		return err == nil && len(si.Status.Clusters) == 1, nil
	})
	if err != nil {
		t.Fatalf("shop/cart was not imported after the migration: %v (%+v)", err, si)
	}
	if si.Spec.Type != mcsv1beta1.ClusterSetIP || len(si.Spec.IPs) != 1 || si.Spec.IPs[0] != vip || si.Status.Clusters[0].Cluster != "west" {
		t.Fatalf("shop/cart after the migration: %s %v from %v, want west's ClusterSetIP %s", si.Spec.Type, si.Spec.IPs, si.Status.Clusters, vip)
	}
}
