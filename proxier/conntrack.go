package proxier

import (
	"maps"
	"net/netip"
	"slices"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/mcsd-io/mcsd/proxier/netfilter"
)

// datagramPorts are a service's UDP and SCTP ports with the addresses of
// the endpoints its rules send them to.
func datagramPorts(r *renderedService) map[netfilter.ServicePort][]netip.Addr {
	if r == nil {
		return nil
	}
	vip, err := netip.ParseAddr(r.vip)
	if err != nil {
		return nil
	}
	ports := map[netfilter.ServicePort][]netip.Addr{}
	for pk, eps := range r.slots {
		if pk.protocol != v1.ProtocolUDP && pk.protocol != v1.ProtocolSCTP {
			continue
		}
		addrs := make([]netip.Addr, len(eps))
		for i, e := range eps {
			addrs[i] = e.ip
		}
		slices.SortFunc(addrs, netip.Addr.Compare)
		ports[netfilter.ServicePort{Protocol: pk.protocol, Address: netip.AddrPortFrom(vip, uint16(pk.port))}] = slices.Compact(addrs)
	}
	return ports
}

// conntrackChanges says whether syncing names changes where any datagram
// port sends (a port added or gone, an endpoint added or gone), and returns
// the ports that go away.
func (p *Proxier) conntrackChanges(names []types.NamespacedName, renders map[types.NamespacedName]*renderedService) (bool, map[netfilter.ServicePort][]netip.Addr) {
	changed := false
	gone := map[netfilter.ServicePort][]netip.Addr{}
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
func (p *Proxier) cleanConntrack(gone map[netfilter.ServicePort][]netip.Addr) {
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
