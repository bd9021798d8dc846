package vipalloc

import (
	"cmp"
	"net/netip"
	"slices"
	"time"

	"github.com/mcsd-io/mcsd/internal/record"
)

// Reasons a record may not hold a ClusterSetIP.
const (
	// ReasonOutsideRange: the address is outside the clusterset ranges.
	ReasonOutsideRange = "ClusterSetIPOutsideRange"
	// ReasonNotOwned: the address is in no claimed block, or in another
	// cluster's block and not a copy of what that cluster gave the
	// service.
	ReasonNotOwned = "ClusterSetIPNotOwned"
)

// Holding is one export record's hold of a ClusterSetIP.
type Holding struct {
	Cluster string
	// Service is "<namespace>/<name>".
	Service string
	// Created is the record's precedence (what the broker witnessed).
	Created time.Time
}

// Rule decides which export records may hold which ClusterSetIPs. Exporter
// and importer apply the same rule to the same records, so they merge the
// same VIPs. A record may hold an address:
//
//   - inside ClusterSet (when it has any range), and
//   - inside a block its own cluster owns (see Owners), or, as the copy
//     every exporter of a service makes of the merged VIP, inside another
//     cluster's block when the address belongs to the same service: the
//     owner's own record of that service holds it, or the owner exports
//     the service no longer (the VIP outlives its allocator, as the
//     ClusterSetIP design asks) and every record holding the address is
//     of that one service.
//
// So a member can never point an address of another member's block at a
// service of its choosing: while the owner uses the address, only the
// owner's service gets it; while the owner exports a service, only the
// owner's VIP counts for it; once the owner uses an address no longer, a
// second service holding it makes every copy refused, and the address
// goes dark instead of changing hands. What is left to a member is to
// hold, for a service the owner does not export, an address of the
// owner's block that nothing else holds, which is what a VIP that outlived
// its allocator looks like: it takes no traffic meant for anyone else, and
// the owner's allocator skips an address any record holds.
type Rule struct {
	ClusterSet []netip.Prefix
	Owners     []Claim
}

// Admit returns "" when h may hold vip, else the reason it may not and the
// cluster owning the address, if any. holders are every record holding vip
// (h among them or not); exporters are the clusters with a record of h's
// service.
func (r Rule) Admit(vip netip.Addr, h Holding, holders []Holding, exporters []string) (reason, owner string) {
	vip = vip.Unmap()
	if len(r.ClusterSet) > 0 && !slices.ContainsFunc(r.ClusterSet, func(p netip.Prefix) bool { return p.Contains(vip) }) {
		return ReasonOutsideRange, ""
	}
	owner, ok := OwnerOf(r.Owners, vip)
	switch {
	case !ok:
		return ReasonNotOwned, ""
	case owner == h.Cluster:
		return "", owner
	}
	if !slices.ContainsFunc(holders, func(o Holding) bool { return o.Cluster == h.Cluster && o.Service == h.Service }) {
		holders = append(slices.Clip(holders), h)
	}
	service, ok := serviceOf(owner, holders)
	switch {
	case !ok || service != h.Service:
		return ReasonNotOwned, owner
	case slices.Contains(exporters, owner) && !slices.ContainsFunc(holders, func(o Holding) bool { return o.Cluster == owner }):
		// The owner exports the service with another VIP (or none).
		return ReasonNotOwned, owner
	}
	return "", owner
}

// serviceOf is the service an address of owner's block belongs to: the
// service of owner's own oldest record holding it, else the one service
// every holder agrees on.
func serviceOf(owner string, holders []Holding) (string, bool) {
	var own []Holding
	for _, h := range holders {
		if h.Cluster == owner {
			own = append(own, h)
		}
	}
	if len(own) > 0 {
		oldest := slices.MinFunc(own, func(a, b Holding) int {
			return cmp.Or(a.Created.Compare(b.Created), cmp.Compare(a.Service, b.Service))
		})
		return oldest.Service, true
	}
	if len(holders) == 0 {
		return "", false
	}
	for _, h := range holders[1:] {
		if h.Service != holders[0].Service {
			return "", false
		}
	}
	return holders[0].Service, true
}

// HoldingOf is the hold of an export record on its VIPs.
func HoldingOf(e record.Export) Holding {
	return Holding{Cluster: e.Cluster, Service: record.ServiceKey(e.Namespace, e.Name), Created: e.Created.Time}
}

// Vet returns exports with every VIP the rule refuses removed (a record
// whose VIP is refused counts as one without it, so the merge takes the
// next valid one), and what it removed. exports are the records of one
// service; holdersOf returns every record holding an address.
func (r Rule) Vet(exports []record.Export, holdersOf func(vip netip.Addr) []Holding) ([]record.Export, []Refusal) {
	exporters := make([]string, len(exports))
	for i, e := range exports {
		exporters[i] = e.Cluster
	}
	out := make([]record.Export, len(exports))
	var refused []Refusal
	for i, e := range exports {
		out[i] = e
		var kept []string
		for _, v := range e.VIPs {
			ip, err := netip.ParseAddr(v)
			reason, owner := ReasonOutsideRange, ""
			if err == nil {
				reason, owner = r.Admit(ip, HoldingOf(e), holdersOf(ip.Unmap()), exporters)
			}
			if reason == "" {
				kept = append(kept, v)
				continue
			}
			refused = append(refused, Refusal{Cluster: e.Cluster, VIP: v, Reason: reason, Owner: owner})
		}
		if len(kept) != len(e.VIPs) {
			out[i].VIPs = kept
		}
	}
	return out, refused
}

// Refusal is a VIP a record may not hold.
type Refusal struct {
	Cluster, VIP, Reason string
	// Owner is the cluster whose block holds the address, if any.
	Owner string
}
