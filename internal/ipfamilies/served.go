// Package ipfamilies learns the IP families a cluster serves, as mcsd and
// kubectl mcs join both need them and must agree.
package ipfamilies

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
)

// DefaultServiceCIDR is the ServiceCIDR the API server makes from its
// --service-cluster-ip-range (networking.k8s.io/v1, Kubernetes 1.33+).
const DefaultServiceCIDR = "kubernetes"

// Served are the IP families the cluster serves, when
// --ip-families does not say: those of the cluster's default ServiceCIDR,
// in its order, less IPv6 when this host's kernel has none (booted with
// ipv6.disable=1), so that an IPv4-only cluster imports no IPv6 service
// and a node without IPv6 never programs ip6 tables.
func Served(ctx context.Context, kube kubernetes.Interface, hasIPv6 func() bool) ([]corev1.IPFamily, error) {
	sc, err := kube.NetworkingV1().ServiceCIDRs().Get(ctx, DefaultServiceCIDR, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("--ip-families: reading the ServiceCIDR %q to learn the cluster's IP families (give --ip-families=IPv4, IPv6 or IPv4,IPv6 instead): %w", DefaultServiceCIDR, err)
	}
	var families []corev1.IPFamily
	for _, c := range sc.Spec.CIDRs {
		p, err := netip.ParsePrefix(c)
		if err != nil {
			continue
		}
		f := corev1.IPv6Protocol
		if p.Addr().Is4() {
			f = corev1.IPv4Protocol
		}
		if f == corev1.IPv6Protocol && !hasIPv6() {
			klog.FromContext(ctx).Info("This host has no IPv6: leaving it out of the cluster's IP families", "serviceCIDR", c)
			continue
		}
		if !slices.Contains(families, f) {
			families = append(families, f)
		}
	}
	if len(families) == 0 {
		return nil, fmt.Errorf("--ip-families: the ServiceCIDR %q has no CIDR of a family this host has (%v); give --ip-families", DefaultServiceCIDR, sc.Spec.CIDRs)
	}
	return families, nil
}

// KernelHasIPv6 says whether this host's kernel has IPv6 at all.
func KernelHasIPv6() bool {
	_, err := os.Stat("/proc/sys/net/ipv6")
	return err == nil
}
