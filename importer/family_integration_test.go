package importer_test

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/mcsd-io/mcsd/test/lib/fixture"
	"github.com/mcsd-io/mcsd/test/lib/harness"
	"github.com/mcsd-io/mcsd/test/lib/hold"
)

// TestImporterIPFamilyNotSupported exports an IPv6-only service from a
// dual-stack cluster: the dual-stack cluster imports it, an IPv4-only one
// imports it with Ready False (IPFamilyNotSupported), no ClusterSetIP and
// no EndpointSlices; once the service is dual-stack, the IPv4-only cluster
// imports its IPv4 side.
func TestImporterIPFamilyNotSupported(t *testing.T) {
	cs := harness.Start(t, harness.Options{Clusters: 2, MemberIPFamilies: [][]corev1.IPFamily{harness.DualStack, harness.IPv4Only}})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	members := fixture.Join(t, cs)
	e := &env{t: t, root: t, ctx: ctx, cs: cs, members: members, nodes: map[string]*harness.Node{},
		exporters: map[string]*fixture.Exporter{}, importers: map[string]*fixture.Importer{}}
	for _, m := range members {
		node, err := m.AddNode(ctx)
		if err != nil {
			t.Fatal(err)
		}
		e.nodes[m.ID] = node
		e.importers[m.ID] = fixture.StartImporter(t, m, fixture.ImporterOptions{ClusterTTL: clusterTTL, IPFamilies: m.IPFamilies})
	}
	dual, v4 := members[0], members[1]
	e.startExporter(dual)
	e.namespace("app", members...)
	e.service(dual, "app", "web", false, func(s *corev1.Service) {
		s.Spec.IPFamilyPolicy = ptr.To(corev1.IPFamilyPolicySingleStack)
		s.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv6Protocol}
	})
	pod, err := e.nodes[dual.ID].AddPod(ctx, harness.PodSpec{Namespace: "app", Name: "web", Labels: map[string]string{"app": "web"}})
	if err != nil {
		t.Fatal(err)
	}
	v6Addr, _ := pod.IPOf(corev1.IPv6Protocol)
	v4Addr, _ := pod.IPOf(corev1.IPv4Protocol)
	e.export(dual, "app", "web", nil)

	t.Run("step 1: the dual-stack cluster imports an IPv6 service; the IPv4-only one says IPFamilyNotSupported and has nothing for it", func(t *testing.T) {
		e.t = t
		si := e.imported(dual, "app", "web", time.Minute, "ready with an IPv6 ClusterSetIP", func(si *mcsv1beta1.ServiceImport) bool {
			return len(si.Spec.IPs) == 1 && readyIs(si, metav1.ConditionTrue, "Ready")
		})
		if !slices.Equal(si.Spec.IPFamilies, harness.IPv6Only) {
			t.Fatalf("%s: families %v, want IPv6", dual.ID, si.Spec.IPFamilies)
		}
		e.endpointsBySource(dual, "app", "web", time.Minute, map[string][]string{dual.ID: {v6Addr.String()}})

		si = e.imported(v4, "app", "web", time.Minute, "not ready, IPFamilyNotSupported", func(si *mcsv1beta1.ServiceImport) bool {
			return readyIs(si, metav1.ConditionFalse, string(mcsv1beta1.ServiceImportReasonIPFamilyNotSupported))
		})
		if len(si.Spec.IPs) != 0 || !slices.Equal(si.Spec.IPFamilies, harness.IPv6Only) || si.Spec.Type != mcsv1beta1.ClusterSetIP || len(si.Spec.Ports) != 1 {
			t.Fatalf("%s: spec %+v, want the service's type, families and ports without ClusterSetIPs", v4.ID, si.Spec)
		}
		if got := clustersOf(si); !slices.Equal(got, []string{dual.ID}) {
			t.Fatalf("%s: status.clusters %v, want the exporting cluster", v4.ID, got)
		}
		e.event(v4, "app", "web", string(mcsv1beta1.ServiceImportReasonIPFamilyNotSupported))
		if err := hold.For(ctx, 3*time.Second, 100*time.Millisecond, func(context.Context) error {
			if s := e.slices(v4, "app", "web"); len(s) > 0 {
				return fmt.Errorf("MCS EndpointSlices %v", s)
			}
			return nil
		}); err != nil {
			t.Fatalf("%s: of a service of no family it serves: %v", v4.ID, err)
		}
	})

	t.Run("step 2: made dual-stack, the service is imported into the IPv4-only cluster over IPv4 only", func(t *testing.T) {
		e.t = t
		svc, err := dual.Kube.CoreV1().Services("app").Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		svc.Spec.IPFamilyPolicy = ptr.To(corev1.IPFamilyPolicyPreferDualStack)
		svc.Spec.IPFamilies = nil
		if _, err := dual.Kube.CoreV1().Services("app").Update(ctx, svc, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		// The IPv4-only cluster takes the IPv4 half only: its ClusterSetIP,
		// its family and its EndpointSlices.
		si := e.imported(v4, "app", "web", time.Minute, "ready with its IPv4 ClusterSetIP only", func(si *mcsv1beta1.ServiceImport) bool {
			return len(si.Spec.IPs) == 1 && readyIs(si, metav1.ConditionTrue, "Ready")
		})
		if ip := netip.MustParseAddr(si.Spec.IPs[0]); !ip.Is4() || !slices.Equal(si.Spec.IPFamilies, []corev1.IPFamily{corev1.IPv4Protocol}) {
			t.Fatalf("%s: IPs %v, families %v, want one IPv4 ClusterSetIP", v4.ID, si.Spec.IPs, si.Spec.IPFamilies)
		}
		items := e.endpointsBySource(v4, "app", "web", time.Minute, map[string][]string{dual.ID: {v4Addr.String()}})
		for _, s := range items {
			if s.AddressType != discoveryv1.AddressTypeIPv4 {
				t.Fatalf("%s: slice %s of address type %s", v4.ID, s.Name, s.AddressType)
			}
		}
		// The dual-stack cluster takes both.
		e.imported(dual, "app", "web", time.Minute, "ready with a ClusterSetIP per family", func(si *mcsv1beta1.ServiceImport) bool {
			return len(si.Spec.IPs) == 2 && readyIs(si, metav1.ConditionTrue, "Ready")
		})
		e.endpointsBySource(dual, "app", "web", time.Minute, map[string][]string{dual.ID: {v4Addr.String(), v6Addr.String()}})
	})
}
