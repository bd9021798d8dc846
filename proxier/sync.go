package proxier

import (
	"context"
	"errors"
	"maps"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/knftables"
)

// staleChainDelay is how long a chain stays flushed before it is deleted.
// Before kernel 6.2 the kernel notices only a moment later that a chain a
// deleted map element pointed to is no longer referenced, and refuses to
// delete it until then.
const staleChainDelay = time.Second

// syncProxyRules brings the nftables table up to date with one transaction.
//
// A rewrite (the first sync, one after a failure, one after the table was
// found deleted or flushed) deletes the table and writes it all again. A
// resync (every FullSyncPeriod) also counts the rules of each of the
// proxier's chains, the only rules there are, and rewrites from the
// committed state those whose count is not what was written; like a partial
// sync it renders only the services that changed, so it costs about as
// little and holds no change back. None of them reads the kernel's ruleset.
func (p *Proxier) syncProxyRules() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.initialized.Load() {
		p.logger.V(2).Info("Not syncing nftables until ServiceImports and EndpointSlices have synced")
		return nil
	}
	start := p.clock.Now()
	rewrite := p.needRewrite
	resync := !rewrite && start.Sub(p.lastFullSync) >= p.fullSyncPeriod
	if !rewrite && start.Sub(p.lastTableCheck) >= p.syncPeriod {
		p.lastTableCheck = start
		if !p.tableIntact() {
			rewrite, resync = true, false
		}
	}
	var repair []string
	if resync {
		var missing bool
		if repair, missing = p.chainsToRepair(); missing {
			rewrite, resync = true, false
		}
	}
	changes := p.tracker.checkout()
	changed := p.applyChanges(changes)

	if len(p.staleChains) > 0 && !rewrite {
		p.deleteStaleChains(start)
	}
	full := rewrite || resync
	if !full && len(changed) == 0 {
		p.synced()
		return nil
	}

	names, renders := p.renderServices(changed, rewrite, p.render)

	tx := p.nft.NewTransaction()
	if rewrite {
		writeStatic(tx, p.static, true)
		p.elements.reset()
		clear(p.chainUsers)
		clear(p.staleChains)
	}
	p.repairChains(tx, repair)
	users, rules := p.writeServices(tx, names, renders, rewrite, start)

	kind := "partial"
	switch {
	case rewrite:
		kind = "rewrite"
	case resync:
		kind = "resync"
	}
	p.logger.V(2).Info("Syncing nftables rules", "sync", kind, "services", len(names), "operations", tx.NumOperations())
	if logger := p.logger.V(9); logger.Enabled() {
		logger.Info("Running nftables transaction", "transaction", tx.String())
	}
	if tx.NumOperations() == 0 {
		// A resync that found every chain intact, with no change to apply.
	} else if err := p.nft.Run(context.Background(), tx); err != nil {
		p.logger.Error(err, "nftables sync failed; the next sync rewrites the whole table", "sync", kind)
		if logger := p.logger.V(4); logger.Enabled() {
			logger.Info("Failed nftables transaction", "transaction", tx.String())
		}
		p.metrics.syncFailures.WithLabelValues(string(p.family)).Inc()
		// The element store already counts this transaction's changes and
		// staleChains its flushes: start over.
		p.elements.reset()
		p.needRewrite = true
		clear(p.staleChains)
		return err
	}

	p.chainUsers, p.chainRules = users, rules
	p.commit(names, renders, full, start)

	now := p.clock.Now()
	p.observeSync(start, now, full, changes)
	p.metrics.noLocalEndpoints.WithLabelValues("internal", string(p.family)).Set(float64(p.elements.count(noEndpointServicesMap, dropVerdict)))
	p.synced()
	p.logger.V(2).Info("Synced nftables rules", "sync", kind, "elapsed", now.Sub(start),
		"services", len(p.committed), "servicePorts", p.elements.len(serviceIPsMap)+p.elements.len(noEndpointServicesMap))
	return nil
}

// commit makes renders of names the committed state once the kernel has
// taken them, tells the VIP report, and cleans conntrack where a datagram
// port's endpoints changed (everywhere on a full sync).
func (p *Proxier) commit(names []types.NamespacedName, renders map[types.NamespacedName]*renderedService, full bool, start time.Time) {
	conntrackChanged, goneDatagramPorts := p.conntrackChanges(names, renders)
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
		p.needRewrite = false
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
	if conntrackChanged || full {
		p.cleanConntrack(goneDatagramPorts)
	}
}

// renderServices renders, through render, the services to write, sorted by
// name: all of them (and those to remove) when all is set, the changed ones
// otherwise.
func (p *Proxier) renderServices(changed map[types.NamespacedName]bool, all bool,
	render func(types.NamespacedName) *renderedService) ([]types.NamespacedName, map[types.NamespacedName]*renderedService) {
	write := changed
	if all {
		write = make(map[types.NamespacedName]bool, len(p.services)+len(p.committed))
		for name := range p.services {
			write[name] = true
		}
		for name := range p.committed {
			write[name] = true
		}
	}
	names := slices.SortedFunc(maps.Keys(write), compareNames)
	renders := make(map[types.NamespacedName]*renderedService, len(names))
	for _, name := range names {
		renders[name] = render(name)
	}
	return names, renders
}

// compareNames orders services by namespace/name.
func compareNames(a, b types.NamespacedName) int {
	return strings.Compare(a.String(), b.String())
}

// observeSync records a successful sync's duration, full or partial, and
// how long each change it applied waited.
func (p *Proxier) observeSync(start, now time.Time, full bool, changes checkout) {
	elapsed := now.Sub(start).Seconds()
	p.metrics.syncDuration.WithLabelValues(string(p.family)).Observe(elapsed)
	if full {
		p.metrics.syncFullDuration.WithLabelValues(string(p.family)).Observe(elapsed)
	} else {
		p.metrics.syncPartialDuration.WithLabelValues(string(p.family)).Observe(elapsed)
	}
	for name, times := range changes.triggers {
		for _, t := range times {
			latency := now.Sub(t)
			p.metrics.networkProgramming.WithLabelValues(string(p.family)).Observe(latency.Seconds())
			p.logger.V(4).Info("Network programming", "serviceImport", name, "elapsed", latency)
		}
	}
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
	if svc == nil || !p.ownsVIP(name, svc) {
		return nil
	}
	return render(svc, p.slices[name], p.policy, p.words, p.committed[name])
}

// ownsVIP says whether name is the import its ClusterSetIP is programmed
// for, and logs the conflict when it is not.
func (p *Proxier) ownsVIP(name types.NamespacedName, svc *serviceInfo) bool {
	if owner, _ := p.vipOwner(svc.vip); owner != name {
		p.logger.Error(nil, "ServiceImport has the ClusterSetIP of an older import; not programming it until that is resolved",
			"serviceImport", name, "clustersetIP", svc.vip, "owner", owner)
		return false
	}
	return true
}

// writeServices adds to tx the changes that take the given services from
// their committed state to renders, in an order nftables accepts: shared
// chains before the elements that point to them. A shared chain is written
// when its first user comes (every used one on a rewrite) and
// flushed when its last user goes, to be deleted a moment later. It returns
// the number of users and the rules of each shared chain once tx is
// committed.
func (p *Proxier) writeServices(tx *knftables.Transaction, names []types.NamespacedName, renders map[types.NamespacedName]*renderedService,
	rewrite bool, now time.Time) (map[string]int, map[string][]string) {
	users := maps.Clone(p.chainUsers)
	rules := maps.Clone(p.chainRules)
	if rewrite {
		clear(rules)
	}
	for _, name := range names {
		old, cur := p.committed[name], renders[name]
		if old != nil && !rewrite {
			for c := range old.chains {
				users[c]--
			}
		}
		if cur != nil {
			for c, r := range cur.chains {
				users[c]++
				rules[c] = r
			}
		}
	}
	var written, gone []string
	for c, n := range users {
		switch {
		case n <= 0:
			delete(users, c)
			delete(rules, c)
			if p.chainUsers[c] > 0 {
				gone = append(gone, c)
			}
		case rewrite || p.chainUsers[c] == 0:
			written = append(written, c)
		default:
			if _, stale := p.staleChains[c]; stale {
				written = append(written, c)
			}
		}
	}
	sort.Strings(written)
	sort.Strings(gone)
	for _, c := range written {
		tx.Add(&knftables.Chain{Name: c})
		tx.Flush(&knftables.Chain{Name: c})
		delete(p.staleChains, c)
	}
	for _, c := range written {
		for _, rule := range rules[c] {
			tx.Add(&knftables.Rule{Chain: c, Rule: rule})
		}
	}
	for _, name := range names {
		old, cur := p.committed[name], renders[name]
		var oldElements, curElements []element
		if old != nil && !rewrite {
			oldElements = old.elements
		}
		if cur != nil {
			curElements = cur.elements
		}
		p.elements.diff(oldElements, curElements)
	}
	p.elements.write(tx)
	for _, c := range gone {
		tx.Flush(&knftables.Chain{Name: c})
		p.staleChains[c] = now
	}
	return users, rules
}

// chainsToRepair counts the rules of each static and shared chain through
// the RuleCounter and returns those whose count differs from what was
// written (someone flushed them, or added or deleted a rule), and whether a
// static chain is gone altogether, which only a rewrite repairs. A rule
// changed in place, keeping the count, goes unnoticed until the next
// rewrite.
func (p *Proxier) chainsToRepair() (repair []string, missing bool) {
	want := map[string]int{}
	for _, bc := range baseChains {
		want[bc.name] = 0
	}
	for _, c := range staticChains {
		want[c] = 0
	}
	for _, r := range staticRules(p.static) {
		want[r.Chain]++
	}
	for c, rules := range p.chainRules {
		want[c] = len(rules)
	}
	for _, c := range slices.Sorted(maps.Keys(want)) {
		n, err := p.ruleCounter.CountRules(p.family, c)
		switch {
		case errors.Is(err, ErrNotFound) && p.chainRules[c] == nil:
			p.logger.Info("A chain of the nftables table was deleted behind the proxier's back; rewriting the table", "chain", c)
			return nil, true
		case err != nil || n != want[c]:
			p.logger.Info("A chain of the nftables table was changed behind the proxier's back; rewriting it", "chain", c, "rules", n, "want", want[c], "err", err)
			repair = append(repair, c)
		}
	}
	return repair, false
}

// repairChains adds to tx a rewrite of each of chains from the committed
// state.
func (p *Proxier) repairChains(tx *knftables.Transaction, chains []string) {
	if len(chains) == 0 {
		return
	}
	static := map[string][]*knftables.Rule{}
	for _, r := range staticRules(p.static) {
		static[r.Chain] = append(static[r.Chain], r)
	}
	for _, c := range chains {
		chain := staticChain(c)
		tx.Add(chain)
		tx.Flush(chain)
		if rules, ok := p.chainRules[c]; ok {
			for _, rule := range rules {
				tx.Add(&knftables.Rule{Chain: c, Rule: rule})
			}
			continue
		}
		for _, r := range static[c] {
			tx.Add(r)
		}
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
		p.needRewrite = true
	}
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
