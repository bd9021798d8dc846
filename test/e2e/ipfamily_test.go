package e2e

import (
	"context"
	"fmt"
	"testing"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/mcsd-io/mcsd/test/lib/conformance"
	"github.com/mcsd-io/mcsd/test/lib/harness"
	"github.com/mcsd-io/mcsd/test/lib/hold"
)

// TestIPFamilyNotSupported runs mcsd in a dual-stack cluster and an
// IPv4-only one (--ip-families IPv4) and exports an IPv6-only service from
// the first: it resolves and answers there over IPv6, while the IPv4-only
// cluster's ServiceImport is Ready=False (IPFamilyNotSupported), without
// ClusterSetIPs or EndpointSlices, and its DNS has no address for the name.
func TestIPFamilyNotSupported(t *testing.T) {
	s := startClusterSetWith(t, harness.Options{Clusters: 2, MemberIPFamilies: [][]corev1.IPFamily{harness.DualStack, harness.IPv4Only}})
	e := s.begin(t)
	backend := e.HelloPods(0, 1, "")
	e.Deploy(0, func() *corev1.Service {
		svc := conformance.HelloService()
		svc.Spec.IPFamilyPolicy = ptr.To(corev1.IPFamilyPolicySingleStack)
		svc.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv6Protocol}
		return svc
	}())
	e.Export(0, conformance.HelloServiceExport())

	t.Run("the dual-stack cluster imports it and reaches it over IPv6, TCP and UDP", func(t *testing.T) {
		e := e.In(t)
		e.AwaitImport(0, conformance.CheckIPOf(corev1.IPv6Protocol))
		want, _ := backend[0].IPOf(corev1.IPv6Protocol)
		for _, network := range conformance.TCPAndUDP {
			var last error
			err := wait.PollUntilContextTimeout(e.Ctx(), conformance.PollEvery, conformance.AwaitTimeout, true, func(context.Context) (bool, error) {
				id, err := e.Ask(0, corev1.IPv6Protocol, network, conformance.ServicePort)
				if err == nil && id.IP != want.String() {
					err = fmt.Errorf("answered by %s", id)
				}
				last = err
				return err == nil, nil
			})
			if err != nil {
				t.Fatalf("%s: %s:%d over IPv6/%s never answered by %s: %v", e.Member(0).ID, e.FQDN(), conformance.ServicePort, network, want, last)
			}
		}
	})

	t.Run("the IPv4-only cluster says IPFamilyNotSupported and has nothing for it", func(t *testing.T) {
		e := e.In(t)
		si := e.AwaitImport(1, func(si *mcsv1beta1.ServiceImport) error {
			c := meta.FindStatusCondition(si.Status.Conditions, string(mcsv1beta1.ServiceImportConditionReady))
			if c == nil || c.Status != metav1.ConditionFalse || c.Reason != string(mcsv1beta1.ServiceImportReasonIPFamilyNotSupported) {
				return fmt.Errorf("Ready condition %+v, want False/IPFamilyNotSupported", c)
			}
			return nil
		})
		if len(si.Spec.IPs) != 0 {
			t.Fatalf("%s: spec.ips %v, want none", e.Member(1).ID, si.Spec.IPs)
		}
		if err := hold.For(e.Ctx(), conformance.HoldFor, conformance.PollEvery, func(ctx context.Context) error {
			if slices, err := e.MCSSlices(ctx, 1); err != nil || len(slices) > 0 {
				return fmt.Errorf("MCS EndpointSlices %v (%v)", slices, err)
			}
			for _, qtype := range []uint16{dns.TypeA, dns.TypeAAAA} {
				m, err := e.Query(1, "udp", e.FQDN(), qtype)
				if err != nil {
					return fmt.Errorf("asking %s: %w", dns.TypeToString[qtype], err)
				}
				if addrs := conformance.Addresses(m); len(addrs) > 0 {
					return fmt.Errorf("DNS %s answers %v", dns.TypeToString[qtype], addrs)
				}
			}
			return nil
		}); err != nil {
			t.Fatalf("%s: %v", e.Member(1).ID, err)
		}
	})
}
