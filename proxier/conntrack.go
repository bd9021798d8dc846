package proxier

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
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

// datagramPorts are a service's UDP and SCTP ports with the addresses of
// the endpoints its rules send them to.
func datagramPorts(r *renderedService) map[ServicePort][]netip.Addr {
	if r == nil {
		return nil
	}
	vip, err := netip.ParseAddr(r.vip)
	if err != nil {
		return nil
	}
	ports := map[ServicePort][]netip.Addr{}
	for pk, eps := range r.slots {
		if pk.protocol != v1.ProtocolUDP && pk.protocol != v1.ProtocolSCTP {
			continue
		}
		addrs := make([]netip.Addr, len(eps))
		for i, e := range eps {
			addrs[i] = e.ip
		}
		slices.SortFunc(addrs, netip.Addr.Compare)
		ports[ServicePort{Protocol: pk.protocol, Address: netip.AddrPortFrom(vip, uint16(pk.port))}] = slices.Compact(addrs)
	}
	return ports
}

// conntrackChanges says whether syncing names changes where any datagram
// port sends (a port added or gone, an endpoint added or gone), and returns
// the ports that go away.
func (p *Proxier) conntrackChanges(names []types.NamespacedName, renders map[types.NamespacedName]*renderedService) (bool, map[ServicePort][]netip.Addr) {
	changed := false
	gone := map[ServicePort][]netip.Addr{}
	for _, name := range names {
		before, after := datagramPorts(p.committed[name]), datagramPorts(renders[name])
		for port, eps := range before {
			now, ok := after[port]
			if !ok {
				gone[port] = nil
			}
			changed = changed || !ok || !slices.Equal(eps, now)
		}
		for port := range after {
			if _, ok := before[port]; !ok {
				changed = true
			}
		}
	}
	return changed, gone
}

// cleanConntrack deletes the conntrack entries of every datagram port the
// table serves (and of those just gone) whose replies do not come from an
// endpoint the rules send that port to, as kube-proxy does after a sync.
func (p *Proxier) cleanConntrack(gone map[ServicePort][]netip.Addr) {
	ports := gone
	for _, r := range p.committed {
		maps.Copy(ports, datagramPorts(r))
	}
	if len(ports) == 0 {
		return
	}
	n, err := p.conntrack.CleanStaleEntries(p.family, ports)
	p.metrics.conntrackDeleted.WithLabelValues(string(p.family)).Add(float64(n))
	if err != nil {
		p.metrics.conntrackFailures.WithLabelValues(string(p.family)).Inc()
		p.logger.Error(err, "Could not delete stale conntrack entries of UDP and SCTP ClusterSetIP ports; clients may keep sending to removed endpoints", "ports", len(ports))
		return
	}
	p.logger.V(4).Info("Deleted stale conntrack entries", "ports", len(ports), "entries", n)
}
