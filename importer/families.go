package importer

import (
	"net/netip"
	"slices"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/mcsd-io/mcsd/internal/record"
)

// A cluster imports a service in the IP families it serves (the daemon's
// --ip-families): none of them, and the service is IPFamilyNotSupported;
// some, and the others get no ClusterSetIP and no EndpointSlices here.

// familiesServed says whether a cluster serving the local IP families can
// reach a service of the given ones: it serves one of them, or the
// families of either side are not known.
func familiesServed(service, local []corev1.IPFamily) bool {
	if len(service) == 0 || len(local) == 0 {
		return true
	}
	for _, f := range service {
		if slices.Contains(local, f) {
			return true
		}
	}
	return false
}

// servedIPs returns the addresses of ips whose family is among local (all
// of them when local is empty).
func servedIPs(ips []string, local []corev1.IPFamily) []string {
	if len(local) == 0 {
		return ips
	}
	var out []string
	for _, s := range ips {
		if ip, err := netip.ParseAddr(s); err == nil && slices.Contains(local, record.FamilyOf(ip)) {
			out = append(out, s)
		}
	}
	return out
}

// servedFamilies returns the families of families among local (all of them
// when local is empty).
func servedFamilies(families, local []corev1.IPFamily) []corev1.IPFamily {
	if len(local) == 0 {
		return families
	}
	var out []corev1.IPFamily
	for _, f := range families {
		if slices.Contains(local, f) {
			out = append(out, f)
		}
	}
	return out
}

// servedSlices returns the slices whose address type is a family among
// local (all of them when local is empty).
func servedSlices(in []*discoveryv1.EndpointSlice, local []corev1.IPFamily) []*discoveryv1.EndpointSlice {
	if len(local) == 0 {
		return in
	}
	var out []*discoveryv1.EndpointSlice
	for _, s := range in {
		if slices.Contains(local, corev1.IPFamily(s.AddressType)) {
			out = append(out, s)
		}
	}
	return out
}
