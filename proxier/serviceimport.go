package proxier

import (
	"net/netip"
	"slices"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
)

// serviceInfo is what the proxier needs of a ServiceImport in one IP family.
// It is immutable once built and compared with reflect.DeepEqual.
type serviceInfo struct {
	name types.NamespacedName
	// created orders imports that claim the same ClusterSetIP: the oldest
	// one owns it.
	created time.Time
	// vip is the ClusterSetIP of this family, in canonical form.
	vip   string
	ports []servicePort
	// affinityTimeout is the ClientIP session affinity timeout; zero when
	// the import has no session affinity.
	affinityTimeout time.Duration
	// internalLocal is internalTrafficPolicy: Local.
	internalLocal bool
	// preferClose is a trafficDistribution asking for close endpoints.
	preferClose bool
}

// servicePort is one port of a ServiceImport.
type servicePort struct {
	name     string
	protocol v1.Protocol
	port     int32
}

// defaultAffinityTimeout is the Service API's default for ClientIP affinity.
const defaultAffinityTimeout = time.Duration(v1.DefaultClientIPServiceAffinitySeconds) * time.Second

// reasonOutsideClusterSet is newServiceInfo's reason for a ClusterSetIP
// outside the allowed ranges.
const reasonOutsideClusterSet = "ClusterSetIP outside the clusterset CIDRs"

// newServiceInfo returns the import's view in family, or nil when there is
// nothing to program in it: a headless import, no ClusterSetIP of that
// family, or one outside allowed (when allowed has any range). reason says
// why, for logs.
func newServiceInfo(si *mcsv1beta1.ServiceImport, family v1.IPFamily, allowed []netip.Prefix) (info *serviceInfo, reason string) {
	if si == nil {
		return nil, "deleted"
	}
	if si.Spec.Type != mcsv1beta1.ClusterSetIP {
		return nil, "not of type ClusterSetIP"
	}
	vip := ""
	for _, ip := range si.Spec.IPs {
		addr, err := netip.ParseAddr(ip)
		if err != nil {
			continue
		}
		addr = addr.Unmap()
		if addr.Is4() == (family == v1.IPv4Protocol) {
			vip = addr.String()
			break
		}
	}
	if vip == "" {
		return nil, "no ClusterSetIP of this family"
	}
	if len(allowed) > 0 && !slices.ContainsFunc(allowed, func(p netip.Prefix) bool { return p.Contains(netip.MustParseAddr(vip)) }) {
		return nil, reasonOutsideClusterSet
	}
	info = &serviceInfo{
		name:    types.NamespacedName{Namespace: si.Namespace, Name: si.Name},
		created: si.CreationTimestamp.Time,
		vip:     vip,
	}
	type protocolPort struct {
		protocol v1.Protocol
		port     int32
	}
	seen := map[protocolPort]bool{}
	for _, p := range si.Spec.Ports {
		protocol := p.Protocol
		if protocol == "" {
			protocol = v1.ProtocolTCP
		}
		if p.Port < 1 || p.Port > 65535 {
			continue
		}
		// Two ports with the same protocol and number would fight over
		// one dispatch entry; the first one listed wins.
		key := protocolPort{protocol, p.Port}
		if seen[key] {
			continue
		}
		seen[key] = true
		info.ports = append(info.ports, servicePort{name: p.Name, protocol: protocol, port: p.Port})
	}
	if si.Spec.SessionAffinity == v1.ServiceAffinityClientIP {
		info.affinityTimeout = defaultAffinityTimeout
		if c := si.Spec.SessionAffinityConfig; c != nil && c.ClientIP != nil && c.ClientIP.TimeoutSeconds != nil && *c.ClientIP.TimeoutSeconds > 0 {
			info.affinityTimeout = time.Duration(*c.ClientIP.TimeoutSeconds) * time.Second
		}
	}
	if p := si.Spec.InternalTrafficPolicy; p != nil && *p == v1.ServiceInternalTrafficPolicyLocal {
		info.internalLocal = true
	}
	if d := si.Spec.TrafficDistribution; d != nil {
		switch *d {
		case v1.ServiceTrafficDistributionPreferClose, v1.ServiceTrafficDistributionPreferSameZone, v1.ServiceTrafficDistributionPreferSameNode:
			info.preferClose = true
		}
	}
	return info, ""
}
