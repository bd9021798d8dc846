package proxier

import (
	"context"
	"maps"
	"net/netip"
	"slices"
	"sort"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/knftables"
)

// staleChainDelay is how long a chain stays flushed before it is deleted.
// Before kernel 6.2 the kernel notices only a moment later that a chain a
// deleted map element pointed to is no longer referenced, and refuses to
// delete it until then.
const staleChainDelay = time.Second

// syncProxyRules brings the nftables table up to date with one transaction.
//
// A full sync (the first one, one after a failure, and one every
// FullSyncPeriod) rewrites the whole table: static chains, every service's
// chains, and the static maps and sets, flushed and filled again. A partial
// sync rewrites only the chains of services that changed and adds or
// deletes only the map elements that differ from what was committed. Neither
// reads the kernel's ruleset, except a full sync after start or after a
// failure, which lists the table's object names once to delete leftovers
// it does not remember.
func (p *Proxier) syncProxyRules() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.initialized.Load() {
		p.logger.V(2).Info("Not syncing nftables until ServiceImports and EndpointSlices have synced")
		return nil
	}
	start := p.clock.Now()
	full := p.needFullSync || start.Sub(p.lastFullSync) >= p.fullSyncPeriod
	if !full && p.baseChainsDone && start.Sub(p.lastTableCheck) >= p.syncPeriod {
		p.lastTableCheck = start
		if !p.tableIntact() {
			full, p.needListing = true, true
		}
	}
	changes := p.tracker.checkout()
	changed := p.applyChanges(changes)

	if len(p.staleChains) > 0 {
		p.deleteStaleChains(start)
	}
	if !full && len(changed) == 0 {
		p.synced()
		return nil
	}

	// The services to write: all of them (and those to remove) on a full
	// sync, the changed ones otherwise.
	write := changed
	if full {
		write = make(map[types.NamespacedName]bool, len(p.services)+len(p.committed))
		for name := range p.services {
			write[name] = true
		}
		for name := range p.committed {
			write[name] = true
		}
	}
	names := make([]types.NamespacedName, 0, len(write))
	for name := range write {
		names = append(names, name)
	}
	sort.Slice(names, func(i, j int) bool { return names[i].String() < names[j].String() })
	renders := make(map[types.NamespacedName]*renderedService, len(names))
	for _, name := range names {
		renders[name] = p.render(name)
	}

	var listed map[string][]string
	if full && p.needListing {
		var err error
		if listed, err = p.nft.ListAll(context.Background()); err != nil {
			if !knftables.IsNotFound(err) {
				p.logger.Error(err, "Could not list the nftables table; leftovers from an earlier run stay until the next full sync")
			}
			listed = nil
		}
	}

	tx := p.nft.NewTransaction()
	if full {
		writeStatic(tx, p.static, !p.baseChainsDone)
		p.elements.reset()
	}
	p.writeServices(tx, names, renders, full, listed, start)

	kind := "partial"
	if full {
		kind = "full"
	}
	p.logger.V(2).Info("Syncing nftables rules", "sync", kind, "services", len(names), "operations", tx.NumOperations())
	if logger := p.logger.V(9); logger.Enabled() {
		logger.Info("Running nftables transaction", "transaction", tx.String())
	}
	if err := p.nft.Run(context.Background(), tx); err != nil {
		p.logger.Error(err, "nftables sync failed; the next sync rewrites the whole table", "sync", kind)
		if logger := p.logger.V(4); logger.Enabled() {
			logger.Info("Failed nftables transaction", "transaction", tx.String())
		}
		p.metrics.syncFailures.WithLabelValues(string(p.family)).Inc()
		// The element store already counts this transaction's changes and
		// staleChains its flushes: start over.
		p.needFullSync = true
		p.needListing = true
		clear(p.staleChains)
		return err
	}

	stale := p.staleUDPFlows(names, renders)
	for _, name := range names {
		p.uncarry(p.committed[name])
		if r := renders[name]; r != nil {
			p.committed[name] = r
		} else {
			delete(p.committed, name)
		}
		p.carry(renders[name])
	}
	if full {
		p.needFullSync = false
		p.needListing = false
		p.baseChainsDone = true
		p.lastFullSync = start
		p.lastTableCheck = start
	}
	if !full && p.logger.V(2).Enabled() {
		for _, name := range names {
			r := renders[name]
			if r == nil {
				p.logger.V(2).Info("Removed ServiceImport rules", "serviceImport", name)
			} else {
				p.logger.V(2).Info("Updated ServiceImport rules", "serviceImport", name, "clustersetIP", r.vip, "endpoints", r.endpoints)
			}
		}
	}
	p.clearConntrack(stale)

	now := p.clock.Now()
	elapsed := now.Sub(start).Seconds()
	p.metrics.syncDuration.WithLabelValues(string(p.family)).Observe(elapsed)
	if full {
		p.metrics.syncFullDuration.WithLabelValues(string(p.family)).Observe(elapsed)
	} else {
		p.metrics.syncPartialDuration.WithLabelValues(string(p.family)).Observe(elapsed)
	}
	p.metrics.noLocalEndpoints.WithLabelValues("internal", string(p.family)).Set(float64(p.elements.count(noEndpointServicesMap, dropVerdict)))
	for name, times := range changes.triggers {
		for _, t := range times {
			latency := now.Sub(t)
			p.metrics.networkProgramming.WithLabelValues(string(p.family)).Observe(latency.Seconds())
			p.logger.V(4).Info("Network programming", "serviceImport", name, "elapsed", latency)
		}
	}
	p.synced()
	p.logger.V(2).Info("Synced nftables rules", "sync", kind, "elapsed", now.Sub(start),
		"services", len(p.committed), "servicePorts", p.elements.len(serviceIPsMap)+p.elements.len(noEndpointServicesMap))
	return nil
}

// synced records that the queued changes are applied.
func (p *Proxier) synced() {
	p.reportVIPs()
	p.metrics.lastSync.WithLabelValues(string(p.family)).SetToCurrentTime()
	if p.health != nil {
		p.health.Updated(p.family)
	}
}

// applyChanges folds a checkout into the proxier's view and returns the
// services whose rules must be computed again: those that changed, and
// those that gained or lost a ClusterSetIP to another import claiming it.
func (p *Proxier) applyChanges(c checkout) map[types.NamespacedName]bool {
	changed := make(map[types.NamespacedName]bool, len(c.services)+len(c.slices))
	for name, info := range c.services {
		var vips []string
		if old := p.services[name]; old != nil {
			vips = append(vips, old.vip)
		}
		if info != nil {
			vips = append(vips, info.vip)
		}
		for _, vip := range vips {
			if owner, ok := p.vipOwner(vip); ok {
				changed[owner] = true
			}
		}
		if old := p.services[name]; old != nil {
			delete(p.vipClaims[old.vip], name)
			if len(p.vipClaims[old.vip]) == 0 {
				delete(p.vipClaims, old.vip)
			}
		}
		if info == nil {
			delete(p.services, name)
		} else {
			p.services[name] = info
			if p.vipClaims[info.vip] == nil {
				p.vipClaims[info.vip] = map[types.NamespacedName]bool{}
			}
			p.vipClaims[info.vip][name] = true
		}
		for _, vip := range vips {
			if owner, ok := p.vipOwner(vip); ok {
				changed[owner] = true
			}
		}
		changed[name] = true
	}
	for name, s := range c.slices {
		if len(s) == 0 {
			delete(p.slices, name)
		} else {
			p.slices[name] = s
		}
		changed[name] = true
	}
	return changed
}

// vipOwner is the import a ClusterSetIP is programmed for: of those that
// claim it, the oldest (then the first by namespace and name). ClusterSetIPs
// are unique by allocation; this only settles a conflict while one is being
// resolved.
func (p *Proxier) vipOwner(vip string) (types.NamespacedName, bool) {
	var owner types.NamespacedName
	var ownerInfo *serviceInfo
	for name := range p.vipClaims[vip] {
		info := p.services[name]
		if ownerInfo == nil || info.created.Before(ownerInfo.created) ||
			(info.created.Equal(ownerInfo.created) && name.String() < owner.String()) {
			owner, ownerInfo = name, info
		}
	}
	return owner, ownerInfo != nil
}

// render computes a service's rules, or nil when it has none: it is gone,
// has nothing to program in this family, or another import owns its
// ClusterSetIP.
func (p *Proxier) render(name types.NamespacedName) *renderedService {
	svc := p.services[name]
	if svc == nil {
		return nil
	}
	if owner, _ := p.vipOwner(svc.vip); owner != name {
		p.logger.Error(nil, "ServiceImport has the ClusterSetIP of an older import; not programming it until that is resolved",
			"serviceImport", name, "clustersetIP", svc.vip, "owner", owner)
		return nil
	}
	return render(svc, p.slices[name], p.policy, p.words)
}

// writeServices adds to tx the changes that take the given services from
// their committed rules to renders, in an order nftables accepts: chains
// before the rules and elements that refer to them, flushes of the chains
// that go before deletions of the sets their rules used. On a full sync
// every chain is rewritten and every element added (the containers were
// flushed), and leftovers are found in listed if the table was listed.
func (p *Proxier) writeServices(tx *knftables.Transaction, names []types.NamespacedName, renders map[types.NamespacedName]*renderedService,
	full bool, listed map[string][]string, now time.Time) {
	type chainRules struct {
		name  string
		rules []string
	}
	var written []chainRules
	var newSets []*knftables.Set
	var goneChains []string
	var goneSets []knftables.Object

	for _, name := range names {
		old, cur := p.committed[name], renders[name]
		if cur != nil {
			for _, chain := range sortedKeys(cur.chains) {
				rules := cur.chains[chain]
				_, stale := p.staleChains[chain]
				if full || stale || old == nil || !slices.Equal(old.chains[chain], rules) {
					written = append(written, chainRules{chain, rules})
					delete(p.staleChains, chain)
				}
			}
			for _, set := range sortedKeys(cur.sets) {
				if full || old == nil || old.sets[set] != cur.sets[set] {
					newSets = append(newSets, &knftables.Set{
						Name: set,
						Type: p.words.addrType,
						// "dynamic" is what the kernel turns a set
						// updated from the packet path into anyway;
						// without it, adding the set again would look
						// like a change of flags.
						Flags:   []knftables.SetFlag{knftables.DynamicFlag, knftables.TimeoutFlag},
						Timeout: ptr.To(cur.sets[set]),
					})
				}
			}
		}
		if old != nil && listed == nil {
			for _, chain := range sortedKeys(old.chains) {
				if cur == nil || cur.chains[chain] == nil {
					goneChains = append(goneChains, chain)
				}
			}
			for _, set := range sortedKeys(old.sets) {
				if cur == nil || cur.sets[set] == 0 {
					goneSets = append(goneSets, &knftables.Set{Name: set})
				}
			}
		}
	}
	if listed != nil {
		// Everything in the table that this sync does not write is a
		// leftover, whether remembered or not.
		wanted := map[string]bool{}
		for _, bc := range baseChains {
			wanted[bc.name] = true
		}
		for _, c := range staticChains {
			wanted[c] = true
		}
		for _, c := range staticContainers {
			wanted[c] = true
		}
		for _, r := range renders {
			if r == nil {
				continue
			}
			for c := range r.chains {
				wanted[c] = true
			}
			for s := range r.sets {
				wanted[s] = true
			}
		}
		clear(p.staleChains)
		for _, c := range listed["chain"] {
			if !wanted[c] {
				goneChains = append(goneChains, c)
			}
		}
		sort.Strings(goneChains)
		for _, set := range slices.Sorted(slices.Values(listed["set"])) {
			if !wanted[set] {
				goneSets = append(goneSets, &knftables.Set{Name: set})
			}
		}
		for _, m := range slices.Sorted(slices.Values(listed["map"])) {
			if !wanted[m] {
				goneSets = append(goneSets, &knftables.Map{Name: m})
			}
		}
	}

	for _, c := range written {
		tx.Add(&knftables.Chain{Name: c.name})
		tx.Flush(&knftables.Chain{Name: c.name})
	}
	for _, s := range newSets {
		tx.Add(s)
	}
	for _, c := range written {
		for _, rule := range c.rules {
			tx.Add(&knftables.Rule{Chain: c.name, Rule: rule})
		}
	}
	for _, name := range names {
		old, cur := p.committed[name], renders[name]
		var oldElements, curElements []element
		if old != nil && !full {
			oldElements = old.elements
		}
		if cur != nil {
			curElements = cur.elements
		}
		p.elements.diff(tx, oldElements, curElements)
	}
	for _, c := range goneChains {
		tx.Flush(&knftables.Chain{Name: c})
		p.staleChains[c] = now
	}
	for _, obj := range goneSets {
		tx.Delete(obj)
	}
}

// deleteStaleChains deletes, in a transaction of its own, the chains that
// have been flushed and unreferenced for staleChainDelay.
func (p *Proxier) deleteStaleChains(now time.Time) {
	tx := p.nft.NewTransaction()
	var deleted []string
	for chain, since := range p.staleChains {
		if now.Sub(since) >= staleChainDelay {
			deleted = append(deleted, chain)
		}
	}
	if len(deleted) == 0 {
		return
	}
	sort.Strings(deleted)
	for _, chain := range deleted {
		tx.Delete(&knftables.Chain{Name: chain})
		delete(p.staleChains, chain)
	}
	p.logger.V(4).Info("Deleting stale nftables chains", "chains", len(deleted))
	if err := p.nft.Run(context.Background(), tx); err != nil {
		// Perhaps someone deleted them; a full sync lists the table and
		// finds what is left.
		p.logger.Error(err, "Could not delete stale nftables chains; the next sync rewrites the whole table", "chains", len(deleted))
		p.metrics.cleanupFailures.WithLabelValues(string(p.family)).Inc()
		p.needFullSync = true
		p.needListing = true
	}
}

// staleUDPFlows lists the UDP flows whose endpoint a sync of names takes
// away: an endpoint that served a UDP port of a ClusterSetIP and no longer
// does.
func (p *Proxier) staleUDPFlows(names []types.NamespacedName, renders map[types.NamespacedName]*renderedService) []UDPFlow {
	var flows []UDPFlow
	for _, name := range names {
		old, cur := p.committed[name], renders[name]
		if old == nil {
			continue
		}
		vip, err := netip.ParseAddr(old.vip)
		if err != nil {
			continue
		}
		for port, eps := range old.udp {
			kept := map[netip.Addr]bool{}
			if cur != nil && cur.vip == old.vip {
				for _, e := range cur.udp[port] {
					kept[e.ip] = true
				}
			}
			for _, e := range eps {
				if !kept[e.ip] {
					flows = append(flows, UDPFlow{Service: netip.AddrPortFrom(vip, uint16(port)), Endpoint: e.ip})
					kept[e.ip] = true
				}
			}
		}
	}
	return flows
}

// clearConntrack deletes the conntrack entries of stale UDP flows.
func (p *Proxier) clearConntrack(flows []UDPFlow) {
	if len(flows) == 0 {
		return
	}
	n, err := p.conntrack.DeleteUDPFlows(p.family, flows)
	p.metrics.conntrackDeleted.WithLabelValues(string(p.family)).Add(float64(n))
	if err != nil {
		p.metrics.conntrackFailures.WithLabelValues(string(p.family)).Inc()
		p.logger.Error(err, "Could not delete conntrack entries of UDP flows to removed endpoints; clients may keep sending to them", "flows", len(flows))
		return
	}
	p.logger.V(4).Info("Deleted conntrack entries of UDP flows to removed endpoints", "flows", len(flows), "entries", n)
}

func sortedKeys[V any](m map[string]V) []string {
	return slices.Sorted(maps.Keys(m))
}
