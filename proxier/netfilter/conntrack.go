package netfilter

import (
	"fmt"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
)

// Conntrack deletes the conntrack entries of datagram flows (UDP, SCTP) to a
// ClusterSetIP port that do not go to one of its endpoints. Such a flow has
// no connection to break: without this, a client that keeps sending keeps
// reaching a removed endpoint through its entry, or, if it sent before the
// port had endpoints, keeps its entry that no rule DNATed, for as long as it
// sends. (TCP needs nothing: the endpoint or the client resets the
// connection.) kube-proxy cleans its Services' UDP entries the same way.
type Conntrack interface {
	// CleanStaleEntries deletes the entries of family whose protocol and
	// original destination are a key of ports and whose replies do not
	// come from one of that key's endpoint addresses (none: every entry of
	// the port goes), and returns how many it deleted.
	CleanStaleEntries(family v1.IPFamily, ports map[ServicePort][]netip.Addr) (int, error)
}

// ServicePort is a ClusterSetIP port of a datagram protocol.
type ServicePort struct {
	// Protocol is v1.ProtocolUDP or v1.ProtocolSCTP.
	Protocol v1.Protocol
	// Address is the ClusterSetIP and port clients send to.
	Address netip.AddrPort
}

// netlinkConntrack is the Conntrack of the real kernel.
type netlinkConntrack struct {
	handle *netlink.Handle
}

// NewConntrack returns a Conntrack that talks netlink to the kernel, in the
// network namespace of the calling thread.
func NewConntrack() (Conntrack, error) {
	h, err := netlink.NewHandle(unix.NETLINK_NETFILTER)
	if err != nil {
		return nil, fmt.Errorf("opening a netfilter netlink socket: %w", err)
	}
	return &netlinkConntrack{handle: h}, nil
}

// CleanStaleEntries implements Conntrack with one dump of the conntrack
// table, filtered here.
func (c *netlinkConntrack) CleanStaleEntries(family v1.IPFamily, ports map[ServicePort][]netip.Addr) (int, error) {
	if len(ports) == 0 {
		return 0, nil
	}
	f := staleFilter{ports: make(map[ServicePort]map[netip.Addr]bool, len(ports))}
	for port, eps := range ports {
		live := make(map[netip.Addr]bool, len(eps))
		for _, e := range eps {
			live[e] = true
		}
		f.ports[port] = live
	}
	inet := netlink.InetFamily(unix.AF_INET)
	if family == v1.IPv6Protocol {
		inet = netlink.InetFamily(unix.AF_INET6)
	}
	n, err := c.handle.ConntrackDeleteFilters(netlink.ConntrackTable, inet, f)
	if err != nil {
		return int(n), fmt.Errorf("deleting stale conntrack entries of %d service ports: %w", len(ports), err)
	}
	return int(n), nil
}

// staleFilter matches the entries CleanStaleEntries deletes.
type staleFilter struct {
	ports map[ServicePort]map[netip.Addr]bool
}

var protocolNumbers = map[uint8]v1.Protocol{unix.IPPROTO_UDP: v1.ProtocolUDP, unix.IPPROTO_SCTP: v1.ProtocolSCTP}

func (f staleFilter) MatchConntrackFlow(flow *netlink.ConntrackFlow) bool {
	protocol, ok := protocolNumbers[flow.Forward.Protocol]
	if !ok {
		return false
	}
	dst, ok := netip.AddrFromSlice(flow.Forward.DstIP)
	if !ok {
		return false
	}
	live, ok := f.ports[ServicePort{Protocol: protocol, Address: netip.AddrPortFrom(dst.Unmap(), flow.Forward.DstPort)}]
	if !ok {
		return false
	}
	src, ok := netip.AddrFromSlice(flow.Reverse.SrcIP)
	return !ok || !live[src.Unmap()]
}
