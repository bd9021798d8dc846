package proxier

import (
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
)

// Conntrack deletes the conntrack entries of UDP flows whose endpoint is
// gone. UDP has no connection to break: without this, a client that keeps
// sending to a ClusterSetIP keeps reaching the removed endpoint through its
// conntrack entry for as long as it sends. (TCP needs nothing: the endpoint
// or the client resets the connection.)
type Conntrack interface {
	// DeleteUDPFlows deletes the UDP entries of family whose original
	// destination is a flow's service address and port and whose replies
	// come from the flow's endpoint, and returns how many it deleted.
	DeleteUDPFlows(family v1.IPFamily, flows []UDPFlow) (int, error)
}

// UDPFlow names the conntrack entries of UDP traffic to one service port
// that were DNATed to one endpoint.
type UDPFlow struct {
	// Service is the ClusterSetIP and port the client sent to.
	Service netip.AddrPort
	// Endpoint is the address of the endpoint that is gone.
	Endpoint netip.Addr
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

// DeleteUDPFlows implements Conntrack with one conntrack table dump and a
// netlink filter per flow.
func (c *netlinkConntrack) DeleteUDPFlows(family v1.IPFamily, flows []UDPFlow) (int, error) {
	if len(flows) == 0 {
		return 0, nil
	}
	filters := make([]netlink.CustomConntrackFilter, 0, len(flows))
	for _, f := range flows {
		filter := &netlink.ConntrackFilter{}
		if err := filter.AddProtocol(unix.IPPROTO_UDP); err != nil {
			return 0, err
		}
		if err := filter.AddIP(netlink.ConntrackOrigDstIP, net.IP(f.Service.Addr().AsSlice())); err != nil {
			return 0, err
		}
		if err := filter.AddPort(netlink.ConntrackOrigDstPort, f.Service.Port()); err != nil {
			return 0, err
		}
		if err := filter.AddIP(netlink.ConntrackReplySrcIP, net.IP(f.Endpoint.AsSlice())); err != nil {
			return 0, err
		}
		filters = append(filters, filter)
	}
	inet := netlink.InetFamily(unix.AF_INET)
	if family == v1.IPv6Protocol {
		inet = netlink.InetFamily(unix.AF_INET6)
	}
	n, err := c.handle.ConntrackDeleteFilters(netlink.ConntrackTable, inet, filters...)
	if err != nil {
		return int(n), fmt.Errorf("deleting conntrack entries of %d UDP flows: %w", len(flows), err)
	}
	return int(n), nil
}
