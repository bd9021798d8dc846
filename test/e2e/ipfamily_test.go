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

	"github.com/mcsd-io/mcsd/test/harness"
	"github.com/mcsd-io/mcsd/test/hold"
)

// TestIPFamilyNotSupported runs mcsd in a dual-stack cluster and an
// IPv4-only one (--ip-families IPv4) and exports an IPv6-only service from
// the first: it resolves and answers there over IPv6, while the IPv4-only
// cluster's ServiceImport is Ready=False (IPFamilyNotSupported), without
// ClusterSetIPs or EndpointSlices, and its DNS has no address for the name.
func TestIPFamilyNotSupported(t *testing.T) {
	s := startClusterSetWith(t, harness.Options{Clusters: 2, MemberIPFamilies: [][]corev1.IPFamily{harness.DualStack, harness.IPv4Only}})
	e := s.begin(t)
	backend := e.helloPods(0, 1, "")
	e.deploy(0, func() *corev1.Service {
		svc := helloService()
		svc.Spec.IPFamilyPolicy = ptr.To(corev1.IPFamilyPolicySingleStack)
		svc.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv6Protocol}
		return svc
	}())
	e.export(0, helloServiceExport())

	t.Run("the dual-stack cluster imports it and reaches it over IPv6, TCP and UDP", func(t *testing.T) {
		e := e.in(t)
		e.awaitImport(0, checkIPOf(corev1.IPv6Protocol))
		want, _ := backend[0].IPOf(corev1.IPv6Protocol)
		for _, network := range tcpAndUDP {
			var last error
			err := wait.PollUntilContextTimeout(e.ctx, pollEvery, awaitTimeout, true, func(context.Context) (bool, error) {
				id, err := e.ask(0, corev1.IPv6Protocol, network, servicePort)
				if err == nil && id.IP != want.String() {
					err = fmt.Errorf("answered by %s", id)
				}
				last = err
				return err == nil, nil
			})
			if err != nil {
				t.Fatalf("%s: %s:%d over IPv6/%s never answered by %s: %v", e.member(0).ID, e.fqdn(), servicePort, network, want, last)
			}
		}
	})

	t.Run("the IPv4-only cluster says IPFamilyNotSupported and has nothing for it", func(t *testing.T) {
		e := e.in(t)
		si := e.awaitImport(1, func(si *mcsv1beta1.ServiceImport) error {
			c := meta.FindStatusCondition(si.Status.Conditions, string(mcsv1beta1.ServiceImportConditionReady))
			if c == nil || c.Status != metav1.ConditionFalse || c.Reason != string(mcsv1beta1.ServiceImportReasonIPFamilyNotSupported) {
				return fmt.Errorf("Ready condition %+v, want False/IPFamilyNotSupported", c)
			}
			return nil
		})
		if len(si.Spec.IPs) != 0 {
			t.Fatalf("%s: spec.ips %v, want none", e.member(1).ID, si.Spec.IPs)
		}
		if err := hold.For(e.ctx, holdFor, pollEvery, func(ctx context.Context) error {
			if slices, err := e.mcsSlices(ctx, 1); err != nil || len(slices) > 0 {
				return fmt.Errorf("MCS EndpointSlices %v (%v)", slices, err)
			}
			for _, qtype := range []uint16{dns.TypeA, dns.TypeAAAA} {
				m, err := e.query(1, "udp", e.fqdn(), qtype)
				if err != nil {
					return fmt.Errorf("asking %s: %w", dns.TypeToString[qtype], err)
				}
				if addrs := addresses(m); len(addrs) > 0 {
					return fmt.Errorf("DNS %s answers %v", dns.TypeToString[qtype], addrs)
				}
			}
			return nil
		}); err != nil {
			t.Fatalf("%s: %v", e.member(1).ID, err)
		}
	})
}
