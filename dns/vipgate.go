package dns

import (
	"net/netip"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
)

// Resolvable means reachable. When the node's data plane is mcsd's own
// proxier, a ClusterSetIP is handed out only once the proxier has committed
// rules for it: a client that resolves a name and connects at once must
// never find the address unroutable. The proxier reports what it committed
// after each sync (VIPsProgrammed); the Index filters ClusterSetIPs at
// publish time, so queries pay nothing for it.

// vipGate is the Index's record of which ClusterSetIPs the data plane
// carries. Its maps are guarded by the Index's mutex.
type vipGate struct {
	// gated are the families a proxier reports on (true: IPv4). ClusterSetIPs
	// of other families pass: nothing of this node would ever carry them.
	gated map[bool]bool
	// reported are the gated families whose proxier has reported at least
	// once; the Index is not synced before every gated family has.
	reported map[bool]bool
	ready    atomic.Bool
	carried  map[netip.Addr]bool
	// owners are the services whose ServiceImport lists each ClusterSetIP,
	// to publish again when it becomes carried or stops being carried.
	owners map[netip.Addr]map[serviceKey]struct{}
}

// GateVIPs makes the Index hold back each ClusterSetIP of the given families
// until VIPsProgrammed reports it carried, and answer SERVFAIL (not synced)
// until each of those families has reported once. A ClusterSetIP service
// none of whose ClusterSetIPs is carried does not exist in DNS meanwhile
// (NXDOMAIN, as before its ServiceImport existed). Call it before Run; with
// no families it does nothing.
func (x *Index) GateVIPs(families ...corev1.IPFamily) {
	if len(families) == 0 {
		return
	}
	g := &vipGate{
		gated:    map[bool]bool{},
		reported: map[bool]bool{},
		carried:  map[netip.Addr]bool{},
		owners:   map[netip.Addr]map[serviceKey]struct{}{},
	}
	for _, f := range families {
		g.gated[f == corev1.IPv4Protocol] = true
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	x.gate = g
}

// VIPsProgrammed is told by the data plane of one family, after each sync
// that committed rules, which ClusterSetIPs it now carries (added) and no
// longer carries (removed). It has the shape of proxier.VIPObserver.
func (x *Index) VIPsProgrammed(family corev1.IPFamily, added, removed []netip.Addr) {
	x.mu.Lock()
	defer x.mu.Unlock()
	g := x.gate
	if g == nil {
		return
	}
	touched := map[serviceKey]struct{}{}
	for _, a := range removed {
		a = a.Unmap()
		delete(g.carried, a)
		for k := range g.owners[a] {
			touched[k] = struct{}{}
		}
	}
	for _, a := range added {
		a = a.Unmap()
		g.carried[a] = true
		for k := range g.owners[a] {
			touched[k] = struct{}{}
		}
	}
	for k := range touched {
		x.publish(k)
	}
	g.reported[family == corev1.IPv4Protocol] = true
	if !g.ready.Load() && len(g.reported) == len(g.gated) {
		g.ready.Store(true)
		x.logger.Info("The data plane has reported its ClusterSetIPs; serving them", "carried", len(g.carried))
	}
	if len(added)+len(removed) > 0 {
		x.logger.V(4).Info("ClusterSetIPs carried by the data plane changed", "ipFamily", family, "added", len(added), "removed", len(removed), "services", len(touched))
	}
}

// carries says whether a ClusterSetIP may be handed out. The Index's mutex
// must be held.
func (g *vipGate) carries(a netip.Addr) bool {
	return !g.gated[a.Is4()] || g.carried[a]
}

// claim records that a service's ServiceImport lists vips. Nil-safe.
func (g *vipGate) claim(key serviceKey, vips []netip.Addr) {
	if g == nil {
		return
	}
	for _, a := range vips {
		if g.owners[a] == nil {
			g.owners[a] = map[serviceKey]struct{}{}
		}
		g.owners[a][key] = struct{}{}
	}
}

// release undoes claim. Nil-safe.
func (g *vipGate) release(key serviceKey, vips []netip.Addr) {
	if g == nil {
		return
	}
	for _, a := range vips {
		delete(g.owners[a], key)
		if len(g.owners[a]) == 0 {
			delete(g.owners, a)
		}
	}
}
