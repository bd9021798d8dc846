package harness

import (
	"fmt"
	"net/netip"
	"slices"

	corev1 "k8s.io/api/core/v1"
)

// The harness's IPv6 addresses are unique local addresses (fd00::/8) that
// spell its IPv4 ones: each group holds the decimal digits of an IPv4
// octet, read as hex, so that 100.65.1.7 and fd00:100:65:1::7 are the same
// pod.
//
//	node uplinks          fd00:100:64::<n>/64 on the fabric bridge
//	pods of cluster c     fd00:100:<64+c>:<node>::/64 per node, fd00:100:<64+c>::/48 per cluster
//	services of cluster c fd00:100:<96+c>::/112 (allocated by its API server)
//	pod gateway           fe80::1 (on the node's side of every pod veth)
const podGateway6 = "fe80::1"

// ipv6 parses an address spelled as described above.
func ipv6(s string) netip.Addr { return netip.MustParseAddr(s) }

func nodeIPv6(global int) netip.Addr { return ipv6(fmt.Sprintf("fd00:100:64::%d", global)) }

func podCIDRv6(cluster int) netip.Prefix {
	return netip.PrefixFrom(ipv6(fmt.Sprintf("fd00:100:%d::", 64+cluster)), 48)
}

func podSubnetV6(cluster, node int) netip.Prefix {
	return netip.PrefixFrom(ipv6(fmt.Sprintf("fd00:100:%d:%d::", 64+cluster, node)), 64)
}

func serviceCIDRv6(cluster int) netip.Prefix {
	return netip.PrefixFrom(ipv6(fmt.Sprintf("fd00:100:%d::", 96+cluster)), 112)
}

func podCIDRv4(cluster int) netip.Prefix {
	return netip.PrefixFrom(netip.AddrFrom4([4]byte{100, byte(64 + cluster), 0, 0}), 16)
}

func podSubnetV4(cluster, node int) netip.Prefix {
	return netip.PrefixFrom(netip.AddrFrom4([4]byte{100, byte(64 + cluster), byte(node), 0}), 24)
}

func serviceCIDRv4(cluster int) netip.Prefix {
	return netip.PrefixFrom(netip.AddrFrom4([4]byte{100, byte(96 + cluster), 0, 0}), 16)
}

// podAddr is the seq'th address of a pod subnet (seq < 255).
func podAddr(subnet netip.Prefix, seq int) netip.Addr {
	if subnet.Addr().Is6() {
		// fd00:100:65:1::<seq>, the seq's decimal digits read as hex.
		return ipv6(fmt.Sprintf("%s%d", subnet.Addr(), seq))
	}
	b := subnet.Addr().As4()
	b[3] = byte(seq)
	return netip.AddrFrom4(b)
}

// IPv4Only, DualStack and IPv6Only are the IP families a cluster can have.
var (
	IPv4Only  = []corev1.IPFamily{corev1.IPv4Protocol}
	DualStack = []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}
	IPv6Only  = []corev1.IPFamily{corev1.IPv6Protocol}
)

// checkFamilies accepts IPv4, IPv6 or both, each once.
func checkFamilies(families []corev1.IPFamily) error {
	if len(families) == 0 || len(families) > 2 {
		return fmt.Errorf("IP families %v: want IPv4, IPv6 or both", families)
	}
	for k, f := range families {
		if f != corev1.IPv4Protocol && f != corev1.IPv6Protocol {
			return fmt.Errorf("unknown IP family %q", f)
		}
		if slices.Contains(families[:k], f) {
			return fmt.Errorf("IP family %s given twice", f)
		}
	}
	return nil
}

// HasFamily says whether the cluster serves the IP family.
func (c *Cluster) HasFamily(f corev1.IPFamily) bool { return slices.Contains(c.IPFamilies, f) }

// FamilyOf is the IP family of an address.
func FamilyOf(a netip.Addr) corev1.IPFamily {
	if a.Unmap().Is4() {
		return corev1.IPv4Protocol
	}
	return corev1.IPv6Protocol
}

// IPOf returns the pod's address of the family, if it has one.
func (p *Pod) IPOf(f corev1.IPFamily) (netip.Addr, bool) {
	for _, a := range p.IPs {
		if FamilyOf(a) == f {
			return a, true
		}
	}
	return netip.Addr{}, false
}

// SharedFamilies are the IP families every given cluster serves, in the
// first cluster's order.
func SharedFamilies(clusters ...*Cluster) []corev1.IPFamily {
	if len(clusters) == 0 {
		return nil
	}
	var out []corev1.IPFamily
	for _, f := range clusters[0].IPFamilies {
		all := true
		for _, c := range clusters[1:] {
			all = all && c.HasFamily(f)
		}
		if all {
			out = append(out, f)
		}
	}
	return out
}
