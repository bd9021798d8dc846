package broker_test

import (
	"context"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
	mcsclient "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned"

	"github.com/mcsd-io/mcsd/broker"
	"github.com/mcsd-io/mcsd/internal/record"
	"github.com/mcsd-io/mcsd/test/lib/harness"
	"github.com/mcsd-io/mcsd/vipalloc"
)

const ns = broker.DefaultNamespace

type member struct {
	id   string
	kube kubernetes.Interface
	mcs  mcsclient.Interface
}

// addMember joins member id to the broker b (installed) with its pod CIDRs
// and returns clients of its identity.
func addMember(ctx context.Context, t *testing.T, b *harness.Cluster, id string, pods ...netip.Prefix) member {
	t.Helper()
	token, err := broker.AddMember(ctx, b.Kube, ns, id, broker.MemberOptions{PodCIDRs: pods})
	if err != nil {
		t.Fatal(err)
	}
	cfg := b.TokenConfig(token)
	return member{id: id, kube: kubernetes.NewForConfigOrDie(cfg), mcs: mcsclient.NewForConfigOrDie(cfg)}
}

// records and slices are clients of the member's records and slices in its
// own namespace.
func (m member) records() mcsRecords {
	return m.mcs.MulticlusterV1beta1().ServiceImports(record.MemberNamespace(ns, m.id))
}

func (m member) slices() sliceClient {
	return m.kube.DiscoveryV1().EndpointSlices(record.MemberNamespace(ns, m.id))
}

// exportRecord is id's export record of shop/<name> as the exporter writes
// it, with the given VIPs.
func exportRecord(t *testing.T, id, name string, vips ...string) *mcsv1beta1.ServiceImport {
	t.Helper()
	e := record.Export{
		Cluster: id, Namespace: "shop", Name: name, Created: metav1.NewTime(time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)),
		Type:       mcsv1beta1.ClusterSetIP,
		Ports:      []mcsv1beta1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}},
		IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol},
		VIPs:       vips,
	}
	if len(vips) == 0 {
		e.Type = mcsv1beta1.Headless
	}
	si := record.Encode(e)
	si.Namespace = record.MemberNamespace(ns, id)
	return si
}

// slice is id's first broker EndpointSlice of shop/<name> as the exporter
// writes it (addresses, conditions and hostname), with one endpoint per
// address.
func slice(id, name string, family discoveryv1.AddressType, addrs ...string) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name: record.EndpointSliceName(id, "shop", name, family, 0), Namespace: record.MemberNamespace(ns, id),
			Labels: record.EndpointSliceLabels(id, "shop", name),
		},
		AddressType: family,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To[int32](8080)}},
	}
	for i, a := range addrs {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{
			Addresses:  []string{a},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true), Serving: ptr.To(true), Terminating: ptr.To(false)},
			Hostname:   ptr.To("web-" + strconv.Itoa(i)),
		})
	}
	return s
}

func claim(id, name, block string) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{vipalloc.LabelClaim: "", mcsv1beta1.LabelSourceCluster: id}},
		Data:       map[string]string{vipalloc.ClaimKey: block},
	}
}

func refused(t *testing.T, err error, wantInMessage string) {
	t.Helper()
	if err == nil {
		t.Fatal("the API server accepted a forbidden write")
	}
	if !strings.Contains(err.Error(), wantInMessage) {
		t.Fatalf("refusal %q does not say %q", err, wantInMessage)
	}
	if !strings.Contains(err.Error(), "ValidatingAdmissionPolicy 'mcsd-broker-") {
		t.Fatalf("refusal %q is not the broker's admission policy's", err)
	}
}

func accepted(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("a legitimate write was refused: %v", err)
	}
}

func TestAMemberCannotForgeAnotherMembersRecords(t *testing.T) {
	cs := harness.Start(t, harness.Options{Clusters: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	b := cs.Broker
	if err := broker.Install(ctx, b.Config, broker.Settings{}); err != nil {
		t.Fatal(err)
	}
	// Install returned once the policies are enforced: a member's first
	// forbidden write, right after it, is refused (here as a member identity
	// impersonated by the administrator, before any member exists).
	impersonated := rest.CopyConfig(b.Config)
	impersonated.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + ns + ":cluster-cluster2", Groups: []string{"system:masters"}}
	_, err := kubernetes.NewForConfigOrDie(impersonated).CoordinationV1().Leases(ns).Create(ctx, &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: record.LeaseName("cluster3"), Labels: record.LeaseLabels("cluster2")},
	}, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	refused(t, err, "cluster cluster2 may only write leases in its own namespace")
	if err := broker.Install(ctx, b.Config, broker.Settings{}); err != nil {
		t.Fatalf("installing twice must be harmless: %v", err)
	}
	pods := map[string][]netip.Prefix{
		"cluster2": {netip.MustParsePrefix("10.2.0.0/16"), netip.MustParsePrefix("fd00:2::/64")},
		"cluster3": {netip.MustParsePrefix("10.3.0.0/16")},
	}
	// Install returns once the policies are enforced: no waiting here.
	two, three := addMember(ctx, t, b, "cluster2", pods["cluster2"]...), addMember(ctx, t, b, "cluster3", pods["cluster3"]...)
	records := member.records
	slices := member.slices
	create := metav1.CreateOptions{}

	t.Run("a member's own writes, as the exporter makes them, pass", func(t *testing.T) {
		_, err := records(three).Create(ctx, exportRecord(t, "cluster3", "cart", "243.3.0.10"), create)
		accepted(t, err)
		si, err := records(two).Create(ctx, exportRecord(t, "cluster2", "cart", "243.2.0.10"), create)
		accepted(t, err)
		si.Spec.IPs = []string{"243.2.0.11", "fd7a:6d63:7364:2::11"}
		si.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}
		_, err = records(two).Update(ctx, si, metav1.UpdateOptions{})
		accepted(t, err)
		_, err = records(two).Create(ctx, exportRecord(t, "cluster2", "headless"), create)
		accepted(t, err)
		accepted(t, records(two).Delete(ctx, record.Name("cluster2", "shop", "headless"), metav1.DeleteOptions{}))

		_, err = slices(three).Create(ctx, slice("cluster3", "cart", discoveryv1.AddressTypeIPv4, "10.3.0.5"), create)
		accepted(t, err)
		s, err := slices(two).Create(ctx, slice("cluster2", "cart", discoveryv1.AddressTypeIPv4, "10.2.0.5", "10.2.1.6"), create)
		accepted(t, err)
		s.Endpoints = s.Endpoints[:1]
		_, err = slices(two).Update(ctx, s, metav1.UpdateOptions{})
		accepted(t, err)
		_, err = slices(two).Create(ctx, slice("cluster2", "cart", discoveryv1.AddressTypeIPv6, "fd00:2::5"), create)
		accepted(t, err)
		_, err = slices(two).Create(ctx, slice("cluster2", "empty", discoveryv1.AddressTypeIPv4), create)
		accepted(t, err)
		accepted(t, slices(two).Delete(ctx, record.EndpointSliceName("cluster2", "shop", "empty", discoveryv1.AddressTypeIPv4, 0), metav1.DeleteOptions{}))

		leases := two.kube.CoordinationV1().Leases(record.MemberNamespace(ns, "cluster2"))
		l, err := leases.Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: record.LeaseName("cluster2"), Labels: record.LeaseLabels("cluster2")},
			Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To("cluster2"), LeaseDurationSeconds: ptr.To[int32](10)},
		}, create)
		accepted(t, err)
		l.Spec.RenewTime = ptr.To(metav1.NewMicroTime(time.Now()))
		_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
		accepted(t, err)

		for _, m := range []member{two, three} {
			c := vipalloc.Claimer{Kube: m.kube, Namespace: ns, ClusterID: m.id}
			v4, err := c.Claim(ctx, vipalloc.DefaultClusterSetCIDRv4, netip.Prefix{}, vipalloc.DefaultBlockBitsV4)
			accepted(t, err)
			_, err = c.Claim(ctx, vipalloc.DefaultClusterSetCIDRv6, netip.Prefix{}, vipalloc.DefaultBlockBitsV6)
			accepted(t, err)
			if m.id == "cluster3" {
				continue
			}
			// Released and claimed again, as a member that lost a race does.
			accepted(t, c.Release(ctx, v4))
			_, err = c.Claim(ctx, vipalloc.DefaultClusterSetCIDRv4, v4, 0)
			accepted(t, err)
		}
	})

	t.Run("a member reads every member's records across their namespaces, by label", func(t *testing.T) {
		list, err := two.mcs.MulticlusterV1beta1().ServiceImports(metav1.NamespaceAll).List(ctx, metav1.ListOptions{LabelSelector: record.ServiceSelector("shop", "cart").String()})
		if err != nil || len(list.Items) != 2 {
			t.Fatalf("list = %d items, %v; want both records", len(list.Items), err)
		}
		for _, si := range list.Items {
			if !record.InMember(ns, &si) {
				t.Errorf("record %s/%s is not in its member's namespace", si.Namespace, si.Name)
			}
		}
		leases, err := three.kube.CoordinationV1().Leases(metav1.NamespaceAll).List(ctx, metav1.ListOptions{LabelSelector: record.LabelSourceCluster})
		if err != nil || len(leases.Items) != 1 {
			t.Fatalf("leases = %v, %v; want cluster2's", leases, err)
		}
	})

	t.Run("labels: objects labelled with another cluster or none are refused", func(t *testing.T) {
		si := exportRecord(t, "cluster2", "forged")
		si.Labels[mcsv1beta1.LabelSourceCluster] = "cluster3"
		_, err := records(two).Create(ctx, si, create)
		refused(t, err, "cluster cluster2 may only write objects labelled multicluster.kubernetes.io/source-cluster=cluster2")
		delete(si.Labels, mcsv1beta1.LabelSourceCluster)
		_, err = records(two).Create(ctx, si, create)
		refused(t, err, "with no source cluster")

		own, err := records(two).Get(ctx, record.Name("cluster2", "shop", "cart"), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		own.Labels[mcsv1beta1.LabelSourceCluster] = "cluster3"
		_, err = records(two).Update(ctx, own, metav1.UpdateOptions{})
		refused(t, err, "may only write objects labelled multicluster.kubernetes.io/source-cluster=cluster2")
	})

	t.Run("names: another cluster's record name is refused", func(t *testing.T) {
		// cluster3's name, cluster2's labels: the squat a label check misses.
		si := exportRecord(t, "cluster2", "orders")
		si.Name = record.Name("cluster3", "shop", "orders")
		_, err := records(two).Create(ctx, si, create)
		refused(t, err, "cluster cluster2 may only write serviceimports named <namespace>.<name>.cluster2")
		// A name that does not match the record's service labels.
		si.Name = record.Name("cluster2", "shop", "payments")
		_, err = records(two).Create(ctx, si, create)
		refused(t, err, "may only write serviceimports named")
		// A hashed name (only for invalid IDs, which members never have).
		si.Name = "shop-orders-cluster2-0123456789abcdef0123456789abcdef01234567"
		_, err = records(two).Create(ctx, si, create)
		refused(t, err, "may only write serviceimports named")
	})

	t.Run("namespaces: another member's namespace and the broker namespace are out of reach", func(t *testing.T) {
		theirNS := record.MemberNamespace(ns, "cluster3")
		theirs := two.mcs.MulticlusterV1beta1().ServiceImports(theirNS)
		err := theirs.Delete(ctx, record.Name("cluster3", "shop", "cart"), metav1.DeleteOptions{})
		if !apierrors.IsForbidden(err) || strings.Contains(err.Error(), "ValidatingAdmissionPolicy") {
			t.Fatalf("cluster2 deleting in cluster3's namespace: %v, want RBAC's refusal", err)
		}
		si := exportRecord(t, "cluster2", "elsewhere")
		si.Namespace = ns
		_, err = two.mcs.MulticlusterV1beta1().ServiceImports(ns).Create(ctx, si, create)
		if !apierrors.IsForbidden(err) || strings.Contains(err.Error(), "ValidatingAdmissionPolicy") {
			t.Fatalf("cluster2 writing a record in the broker namespace: %v, want RBAC's refusal", err)
		}
		// A broker whose RBAC grants too much still keeps each member in
		// its own namespace, by the policy.
		bind(ctx, t, b.Kube, theirNS, "cluster-cluster2", ns, rbacv1.PolicyRule{APIGroups: []string{"multicluster.x-k8s.io"}, Resources: []string{"serviceimports"}, Verbs: []string{"get", "create", "update", "delete"}})
		bind(ctx, t, b.Kube, ns, "cluster-cluster2", ns, rbacv1.PolicyRule{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"create"}})
		for range 50 { // RBAC caches the new binding for a moment
			err = theirs.Delete(ctx, record.Name("cluster3", "shop", "cart"), metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
			if err == nil || !apierrors.IsForbidden(err) || strings.Contains(err.Error(), "ValidatingAdmissionPolicy") {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		refused(t, err, "cluster cluster2 may only write serviceimports in its own namespace (labelled mcsd.io/member-cluster=cluster2), not in "+theirNS)
		mine := exportRecord(t, "cluster2", "squat")
		mine.Namespace = theirNS
		_, err = theirs.Create(ctx, mine, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		refused(t, err, "may only write serviceimports in its own namespace")
		for range 50 {
			_, err = two.kube.CoordinationV1().Leases(ns).Create(ctx, &coordinationv1.Lease{
				ObjectMeta: metav1.ObjectMeta{Name: record.LeaseName("cluster2"), Labels: record.LeaseLabels("cluster2")},
			}, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			if err == nil || !apierrors.IsForbidden(err) || strings.Contains(err.Error(), "ValidatingAdmissionPolicy") {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		refused(t, err, "may only write leases in its own namespace")
	})

	t.Run("names: another cluster's EndpointSlice name is refused", func(t *testing.T) {
		s := slice("cluster2", "orders", discoveryv1.AddressTypeIPv4, "10.2.0.7")
		s.Name = record.EndpointSliceName("cluster3", "shop", "orders", discoveryv1.AddressTypeIPv4, 0)
		_, err := slices(two).Create(ctx, s, create)
		refused(t, err, "cluster cluster2 may only write endpointslices named <namespace>.<name>.cluster2.<ipv4|ipv6>-<index>")
		for _, name := range []string{"shop.orders.cluster2", "shop.orders.cluster2.ipv6-0", "shop.orders.cluster2.ipv4-x", "shop.orders.cluster2.ipv4-0.more"} {
			s.Name = name
			_, err = slices(two).Create(ctx, s, create)
			refused(t, err, "may only write endpointslices named")
		}
	})

	t.Run("names: another cluster's Lease is refused", func(t *testing.T) {
		_, err := two.kube.CoordinationV1().Leases(record.MemberNamespace(ns, "cluster2")).Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: record.LeaseName("cluster3"), Labels: record.LeaseLabels("cluster2")},
		}, create)
		refused(t, err, "cluster cluster2 may only write leases named cluster-cluster2")
	})

	t.Run("names: another cluster's claim, a second claim or another ConfigMap is refused", func(t *testing.T) {
		cms := two.kube.CoreV1().ConfigMaps(ns)
		_, err := cms.Create(ctx, claim("cluster2", vipalloc.ClaimName("cluster3", corev1.IPv4Protocol), "243.99.0.0/16"), create)
		refused(t, err, "cluster cluster2 may only write configmaps named clustersetip-cluster2-ipv4 or clustersetip-cluster2-ipv6")
		_, err = cms.Create(ctx, claim("cluster2", "clustersetip-cluster2-ipv4-second", "243.98.0.0/16"), create)
		refused(t, err, "may only write configmaps named")
		for _, name := range []string{broker.DeclarationName("cluster2"), broker.DeclarationName("cluster3"), broker.SettingsName, "kube-root-ca.crt"} {
			_, err = cms.Create(ctx, &corev1.ConfigMap{
				ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{mcsv1beta1.LabelSourceCluster: "cluster2", broker.LabelDeclaration: ""}},
				Data:       map[string]string{broker.DeclarationPodCIDRsKey: "0.0.0.0/0"},
			}, create)
			refused(t, err, "may only write configmaps named")
		}
		// west withdrawing east's claim.
		err = cms.Delete(ctx, vipalloc.ClaimName("cluster3", corev1.IPv4Protocol), metav1.DeleteOptions{})
		refused(t, err, "may not change or delete an object of cluster cluster3")
	})

	t.Run("claims: only one masked block of the configured size inside the clusterset range", func(t *testing.T) {
		cms := two.kube.CoreV1().ConfigMaps(ns)
		v4 := vipalloc.ClaimName("cluster2", corev1.IPv4Protocol)
		v6 := vipalloc.ClaimName("cluster2", corev1.IPv6Protocol)
		// Free the member's own names first, so that only the policy refuses.
		accepted(t, cms.Delete(ctx, v4, metav1.DeleteOptions{}))
		accepted(t, cms.Delete(ctx, v6, metav1.DeleteOptions{}))
		for _, c := range []struct{ name, block string }{
			{v4, "243.0.0.0/8"},           // the whole clusterset range
			{v4, "243.0.0.0/7"},           // wider still
			{v4, "243.7.0.0/20"},          // too small
			{v4, "243.7.0.0/12"},          // too big
			{v4, "243.7.0.1/16"},          // not masked
			{v4, "10.0.0.0/16"},           // outside the range
			{v4, "fd7a:6d63:7364:7::/64"}, // another family
			{v6, "fd7a:6d63:7364::/48"},   // the whole IPv6 range
			{v6, "fd00:1::/64"},           // outside the IPv6 range
			{v6, "243.7.0.0/16"},          // another family
			{v4, "not-a-cidr"},
			{v4, ""},
		} {
			_, err := cms.Create(ctx, claim("cluster2", c.name, c.block), create)
			refused(t, err, "cluster cluster2 may only claim")
		}
		unlabelled := claim("cluster2", v4, "243.7.0.0/16")
		delete(unlabelled.Labels, vipalloc.LabelClaim)
		_, err := cms.Create(ctx, unlabelled, create)
		refused(t, err, "may only claim")
		extra := claim("cluster2", v4, "243.7.0.0/16")
		extra.Data["more"] = "data"
		_, err = cms.Create(ctx, extra, create)
		refused(t, err, "may only claim")
		_, err = cms.Create(ctx, claim("cluster2", v4, "243.7.0.0/16"), create)
		accepted(t, err)
		_, err = cms.Create(ctx, claim("cluster2", v6, "fd7a:6d63:7364:7::/64"), create)
		accepted(t, err)
	})

	t.Run("claims: updates are refused even where RBAC would allow them", func(t *testing.T) {
		// The member Role grants no update of ConfigMaps; grant it here, as a
		// misconfigured broker might, to see the policy refuse on its own.
		grant(ctx, t, b.Kube, "cluster2", rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"update", "patch"}})
		cms := two.kube.CoreV1().ConfigMaps(ns)
		var err error
		for range 50 { // RBAC caches the new binding for a moment
			var cm *corev1.ConfigMap // members may not get a ConfigMap by name: list or ask the administrator
			if cm, err = b.Kube.CoreV1().ConfigMaps(ns).Get(ctx, vipalloc.ClaimName("cluster2", corev1.IPv4Protocol), metav1.GetOptions{}); err != nil {
				t.Fatal(err)
			}
			cm.Data[vipalloc.ClaimKey] = "243.8.0.0/16"
			if _, err = cms.Update(ctx, cm, metav1.UpdateOptions{}); err == nil || !apierrors.IsForbidden(err) || strings.Contains(err.Error(), "ValidatingAdmissionPolicy") {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		refused(t, err, "cluster cluster2 may not change its ClusterSetIP claim clustersetip-cluster2-ipv4")
	})

	t.Run("VIPs: an export record's VIPs outside the clusterset ranges are refused", func(t *testing.T) {
		for _, vip := range []string{"169.254.169.254", "10.96.0.1", "242.255.255.255", "fd00::1"} {
			si := exportRecord(t, "cluster2", "vip")
			si.Spec.Type = mcsv1beta1.ClusterSetIP
			si.Spec.IPs = []string{vip}
			_, err := records(two).Create(ctx, si, create)
			refused(t, err, "cluster cluster2 may only export VIPs inside the clusterset CIDRs 243.0.0.0/8 and fd7a:6d63:7364::/48, not "+vip)
		}
		own, err := records(two).Get(ctx, record.Name("cluster2", "shop", "cart"), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		own.Spec.IPs = []string{"243.2.0.11", "169.254.169.254"}
		_, err = records(two).Update(ctx, own, metav1.UpdateOptions{})
		refused(t, err, "may only export VIPs inside the clusterset CIDRs")
	})

	t.Run("endpoints: addresses outside the member's declared pod CIDRs are refused", func(t *testing.T) {
		for _, addr := range []string{"10.3.0.5" /* cluster3's pods */, "10.96.0.1", "192.0.2.1", "8.8.8.8"} {
			_, err := slices(two).Create(ctx, slice("cluster2", "ep", discoveryv1.AddressTypeIPv4, "10.2.0.9", addr), create)
			refused(t, err, "cluster cluster2 may only publish endpoints in its declared pod CIDRs 10.2.0.0/16, fd00:2::/64")
		}
		_, err := slices(two).Create(ctx, slice("cluster2", "ep", discoveryv1.AddressTypeIPv6, "fd00:3::1"), create)
		refused(t, err, "may only publish endpoints in its declared pod CIDRs")
		own, err := slices(two).Get(ctx, record.EndpointSliceName("cluster2", "shop", "cart", discoveryv1.AddressTypeIPv4, 0), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		own.Endpoints = append(own.Endpoints, slice("cluster2", "cart", discoveryv1.AddressTypeIPv4, "10.3.0.5").Endpoints...)
		_, err = slices(two).Update(ctx, own, metav1.UpdateOptions{})
		refused(t, err, "may only publish endpoints in its declared pod CIDRs")
		// Further addresses of one endpoint would go unchecked: refused.
		s := slice("cluster2", "ep", discoveryv1.AddressTypeIPv4, "10.2.0.9")
		s.Endpoints[0].Addresses = append(s.Endpoints[0].Addresses, "10.3.0.5")
		_, err = slices(two).Create(ctx, s, create)
		refused(t, err, "cluster cluster2 may only publish endpoints with a single address each")
		// cluster3's own pod CIDRs are cluster3's only.
		_, err = slices(three).Create(ctx, slice("cluster3", "ep", discoveryv1.AddressTypeIPv4, "10.2.0.9"), create)
		refused(t, err, "cluster cluster3 may only publish endpoints in its declared pod CIDRs 10.3.0.0/16")
	})

	t.Run("endpoints: a full EndpointSlice is checked within the CEL cost budget", func(t *testing.T) {
		full := fullSlice(t, ctx, slices(two), "cluster2", broker.DefaultMemberBudget.EndpointsPerSlice)
		full.Endpoints = append(full.Endpoints, full.Endpoints[0])
		full.Endpoints[len(full.Endpoints)-1].Addresses = []string{"10.2.250.1"}
		_, err := slices(two).Create(ctx, full, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		refused(t, err, "cluster cluster2 may not write endpointslices shop.full.cluster2.ipv4-0 with 101 endpoints and 1 ports: the broker allows 100 endpoints")
	})

	t.Run("identity: other ServiceAccounts of the broker namespace are refused", func(t *testing.T) {
		token := saToken(ctx, t, b.Kube, ns, "default", rbacv1.PolicyRule{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"create"}})
		kube := kubernetes.NewForConfigOrDie(b.TokenConfig(token))
		var err error
		for range 50 {
			_, err = kube.CoordinationV1().Leases(ns).Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			if err == nil || !apierrors.IsForbidden(err) || strings.Contains(err.Error(), "member identity") {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		refused(t, err, "ServiceAccount default is not a member identity")
	})

	t.Run("scope: ServiceAccounts of other namespaces of the broker cluster are not bound", func(t *testing.T) {
		const other = "apps"
		if _, err := b.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: other}}, create); err != nil {
			t.Fatal(err)
		}
		token := saToken(ctx, t, b.Kube, other, "controller",
			rbacv1.PolicyRule{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"create", "update", "delete"}},
			rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"create", "update", "delete"}},
			rbacv1.PolicyRule{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"create", "update", "delete"}})
		kube := kubernetes.NewForConfigOrDie(b.TokenConfig(token))
		var err error
		for range 50 { // RBAC caches the new binding for a moment
			_, err = kube.CoordinationV1().Leases(other).Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "controller-leader"}}, create)
			if !apierrors.IsForbidden(err) || strings.Contains(err.Error(), "ValidatingAdmissionPolicy") {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		accepted(t, err)
		_, err = kube.CoreV1().ConfigMaps(other).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "state"}, Data: map[string]string{"k": "v"}}, create)
		accepted(t, err)
		_, err = kube.DiscoveryV1().EndpointSlices(other).Create(ctx, &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Name: "manual"},
			AddressType: discoveryv1.AddressTypeIPv4,
			Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"192.0.2.1", "192.0.2.2"}}},
		}, create)
		accepted(t, err)
	})

	t.Run("a member cannot write outside the broker namespace", func(t *testing.T) {
		si := exportRecord(t, "cluster2", "elsewhere")
		si.Namespace = "default"
		_, err := two.mcs.MulticlusterV1beta1().ServiceImports("default").Create(ctx, si, create)
		if !apierrors.IsForbidden(err) {
			t.Fatalf("writing in namespace default: %v, want Forbidden", err)
		}
	})

	t.Run("quota: each member's namespace holds it to its own budget", func(t *testing.T) {
		budget := broker.DefaultMemberBudget
		for _, id := range []string{"cluster2", "cluster3"} {
			q, err := b.Kube.CoreV1().ResourceQuotas(record.MemberNamespace(ns, id)).Get(ctx, broker.MemberQuotaName, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			for res, want := range map[corev1.ResourceName]int{
				"count/serviceimports.multicluster.x-k8s.io": budget.ServiceImports,
				"count/endpointslices.discovery.k8s.io":      budget.EndpointSlices,
				"count/leases.coordination.k8s.io":           1,
			} {
				if got := q.Spec.Hard[res]; got.Cmp(*resource.NewQuantity(int64(want), resource.DecimalSI)) != 0 {
					t.Errorf("%s's quota %s = %s, want %d", id, res, got.String(), want)
				}
			}
		}
	})

	t.Run("joining again replaces the member's pod CIDRs", func(t *testing.T) {
		more := append(pods["cluster2"], netip.MustParsePrefix("10.22.0.0/16"))
		if _, err := broker.AddMember(ctx, b.Kube, ns, "cluster2", broker.MemberOptions{PodCIDRs: more}); err != nil {
			t.Fatal(err)
		}
		var err error
		for range 100 { // the API server reloads the declaration asynchronously
			_, err = slices(two).Create(ctx, slice("cluster2", "moved", discoveryv1.AddressTypeIPv4, "10.22.0.5"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			if err == nil {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		accepted(t, err)
	})

	t.Run("deleting a member's declaration removes its identity", func(t *testing.T) {
		if err := b.Kube.CoreV1().ConfigMaps(ns).Delete(ctx, broker.DeclarationName("cluster3"), metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		var err error
		for range 300 { // the garbage collector deletes the ServiceAccount and its token
			_, err = three.kube.CoordinationV1().Leases(ns).List(ctx, metav1.ListOptions{})
			if apierrors.IsUnauthorized(err) {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if !apierrors.IsUnauthorized(err) {
			t.Fatalf("cluster3 without a declaration: %v, want its credential refused", err)
		}
		if _, err := b.Kube.RbacV1().RoleBindings(ns).Get(ctx, "mcsd-member-cluster3", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Fatalf("cluster3's RoleBinding: %v, want it deleted", err)
		}
	})

	t.Run("an administrator is not bound by the policies", func(t *testing.T) {
		accepted(t, b.MCS.MulticlusterV1beta1().ServiceImports(record.MemberNamespace(ns, "cluster3")).Delete(ctx, record.Name("cluster3", "shop", "cart"), metav1.DeleteOptions{}))
	})
}

// fullSlice checks that the broker accepts a slice of n endpoints of id's
// own pods (10.2.0.0/16), refuses it with one foreign address, and refuses
// it with 100 addresses per endpoint, all within the CEL cost budget; it
// returns the accepted slice.
func fullSlice(t *testing.T, ctx context.Context, slices sliceClient, id string, n int) *discoveryv1.EndpointSlice {
	t.Helper()
	addrs := make([]string, n)
	for i := range addrs {
		addrs[i] = netip.AddrFrom4([4]byte{10, 2, byte(i / 250), byte(i%250 + 1)}).String()
	}
	full := slice(id, "full", discoveryv1.AddressTypeIPv4, addrs...)
	full.Namespace = "" // the client's
	dryRun := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	_, err := slices.Create(ctx, full, dryRun)
	accepted(t, err)
	bad := full.DeepCopy()
	bad.Endpoints[n-1].Addresses = []string{"10.3.0.5"}
	_, err = slices.Create(ctx, bad, dryRun)
	refused(t, err, "may only publish endpoints in its declared pod CIDRs")
	for i := range bad.Endpoints {
		bad.Endpoints[i].Addresses = nil
		for j := range 100 { // the most addresses an endpoint holds
			bad.Endpoints[i].Addresses = append(bad.Endpoints[i].Addresses, netip.AddrFrom4([4]byte{10, 2, byte(i / 250), byte(j)}).String())
		}
	}
	_, err = slices.Create(ctx, bad, dryRun)
	refused(t, err, "may only publish endpoints with a single address each")
	return full
}

type mcsRecords interface {
	Create(context.Context, *mcsv1beta1.ServiceImport, metav1.CreateOptions) (*mcsv1beta1.ServiceImport, error)
	Update(context.Context, *mcsv1beta1.ServiceImport, metav1.UpdateOptions) (*mcsv1beta1.ServiceImport, error)
	Get(context.Context, string, metav1.GetOptions) (*mcsv1beta1.ServiceImport, error)
	Delete(context.Context, string, metav1.DeleteOptions) error
}

type sliceClient interface {
	Create(context.Context, *discoveryv1.EndpointSlice, metav1.CreateOptions) (*discoveryv1.EndpointSlice, error)
	Update(context.Context, *discoveryv1.EndpointSlice, metav1.UpdateOptions) (*discoveryv1.EndpointSlice, error)
	Get(context.Context, string, metav1.GetOptions) (*discoveryv1.EndpointSlice, error)
	Delete(context.Context, string, metav1.DeleteOptions) error
}

// grant gives member id's ServiceAccount rules beyond the member Role, in
// the broker namespace.
func grant(ctx context.Context, t *testing.T, kube kubernetes.Interface, id string, rules ...rbacv1.PolicyRule) {
	t.Helper()
	bind(ctx, t, kube, ns, broker.ServiceAccountName(id), ns, rules...)
}

// bind gives the ServiceAccount accountNamespace/account rules in
// namespace.
func bind(ctx context.Context, t *testing.T, kube kubernetes.Interface, namespace, account, accountNamespace string, rules ...rbacv1.PolicyRule) {
	t.Helper()
	role, err := kube.RbacV1().Roles(namespace).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{GenerateName: "extra-" + account + "-"}, Rules: rules}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kube.RbacV1().RoleBindings(namespace).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: role.Name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: account, Namespace: accountNamespace}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// saToken creates (if need be) the ServiceAccount namespace/account, grants
// it rules and returns a token of it.
func saToken(ctx context.Context, t *testing.T, kube kubernetes.Interface, namespace, account string, rules ...rbacv1.PolicyRule) string {
	t.Helper()
	var err error
	for range 100 { // the namespace's default ServiceAccount appears shortly
		_, err = kube.CoreV1().ServiceAccounts(namespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: account}}, metav1.CreateOptions{})
		if err == nil || apierrors.IsAlreadyExists(err) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	bind(ctx, t, kube, namespace, account, namespace, rules...)
	tr, err := kube.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, account, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tr.Status.Token
}

// Install takes its namespace and settings from Settings, and the policies
// follow later edits of the settings ConfigMap.
func TestInstallWithOtherSettingsInAnotherNamespace(t *testing.T) {
	cs := harness.Start(t, harness.Options{Clusters: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	b := cs.Broker
	const other = "clusterset"
	// Full EndpointSlices, which fit the etcd quota only with few members.
	settings := broker.Settings{
		Namespace: other, ClusterSetCIDRv4: netip.MustParsePrefix("10.200.0.0/16"), BlockBitsV4: 24,
		MaxMembers: 2, MemberBudget: broker.Budget{EndpointsPerSlice: 1000},
	}
	if err := broker.Install(ctx, b.Config, settings); err != nil {
		t.Fatal(err)
	}
	token, err := broker.AddMember(ctx, b.Kube, other, "east", broker.MemberOptions{PodCIDRs: []netip.Prefix{netip.MustParsePrefix("10.1.0.0/16"), netip.MustParsePrefix("10.2.0.0/16")}})
	if err != nil {
		t.Fatal(err)
	}
	east := kubernetes.NewForConfigOrDie(b.TokenConfig(token))
	eastMCS := mcsclient.NewForConfigOrDie(b.TokenConfig(token))
	cms := east.CoreV1().ConfigMaps(other)
	v4 := vipalloc.ClaimName("east", corev1.IPv4Protocol)
	mk := func(block string) *corev1.ConfigMap {
		c := claim("east", v4, block)
		c.Namespace = other
		return c
	}

	_, err = cms.Create(ctx, mk("243.1.0.0/16"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	refused(t, err, "cluster east may only claim, labelled mcsd.io/clustersetip-block and with the single data key block, one masked /24 block inside the clusterset CIDR 10.200.0.0/16")
	block, err := vipalloc.Claimer{Kube: east, Namespace: other, ClusterID: "east"}.Claim(ctx, settings.ClusterSetCIDRv4, netip.Prefix{}, 24)
	if err != nil || block != netip.MustParsePrefix("10.200.0.0/24") {
		t.Fatalf("claim = %s, %v", block, err)
	}
	si := exportRecord(t, "east", "cart", "243.0.0.1")
	si.Namespace = record.MemberNamespace(other, "east")
	_, err = eastMCS.MulticlusterV1beta1().ServiceImports(si.Namespace).Create(ctx, si, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	refused(t, err, "may only export VIPs inside the clusterset CIDRs 10.200.0.0/16 and fd7a:6d63:7364::/48")

	// The most endpoints a slice holds, checked within the CEL cost budget.
	fullSlice(t, ctx, east.DiscoveryV1().EndpointSlices(record.MemberNamespace(other, "east")), "east", 1000)

	// The administrator widens the range: the policy follows its parameter.
	set, err := b.Kube.CoreV1().ConfigMaps(other).Get(ctx, broker.SettingsName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	set.Data["clusterSetCIDRv4"] = "243.0.0.0/8"
	if _, err := b.Kube.CoreV1().ConfigMaps(other).Update(ctx, set, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	for range 100 {
		if _, err = eastMCS.MulticlusterV1beta1().ServiceImports(si.Namespace).Create(ctx, si, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	accepted(t, err)
}
