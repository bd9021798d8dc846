package proxier

import (
	"maps"
	"slices"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// renderedService is what one ServiceImport puts in the kernel: the outcome
// of its backend's render, kept after a successful sync as the committed
// state the next sync is diffed against. vip, slots and endpoints mean the
// same in every mode; rules are the backend's own (*nftablesService or
// *iptablesService).
type renderedService struct {
	vip string
	// slots holds each service port's endpoints (by portKey) in the order
	// of their index (none for a port without endpoints); the next render
	// keeps each endpoint at its index, so a sync writes only what changed.
	slots map[portKey][]endpoint
	// endpoints counts the endpoints over all ports, for logs.
	endpoints int
	rules     any
}

// portKey names a service port among those of one ClusterSetIP.
type portKey struct {
	protocol v1.Protocol
	port     int32
}

// syncRules brings the kernel's rules up to date with one transaction of
// the backend: a partial sync renders and writes only the services that
// changed; a full sync (every FullSyncPeriod) also repairs what was changed
// behind the proxier's back; a rewrite (the first sync, one after a
// failure, one after the rules were found gone) writes everything. None of
// them reads the kernel's ruleset: what was committed is kept in memory,
// and the backend looks at the kernel only to check, once per sync period,
// that its rules are still there.
func (p *Proxier) syncRules() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.initialized.Load() {
		p.logger.V(2).Info("Not syncing " + string(p.backend.mode()) + " until ServiceImports and EndpointSlices have synced")
		return nil
	}
	start := p.clock.Now()
	kind := p.planSync(start)
	changes := p.tracker.checkout()
	changed := p.applyChanges(changes)
	if kind != rewriteSync {
		if err := p.backend.tidy(start); err != nil {
			p.needRewrite = true
		}
	}
	if kind == partialSync && len(changed) == 0 {
		p.synced()
		return nil
	}

	names, renders := p.renderServices(changed, p.backend.rendersAll(kind))
	w := &syncWrite{kind: kind, names: names, renders: renders, committed: p.committed, start: start}
	if err := p.backend.write(w); err != nil {
		p.needRewrite = true
		if p.syncFailed != nil {
			p.syncFailed(p.family, err)
		}
		return err
	}
	p.commit(names, renders, kind != partialSync, start)

	now := p.clock.Now()
	p.observeSync(start, now, kind != partialSync, changes)
	p.metrics.noLocalEndpoints.WithLabelValues("internal", string(p.family)).Set(float64(p.backend.dropped(p.committed)))
	p.synced()
	p.logger.V(2).Info("Synced "+string(p.backend.mode())+" rules", append([]any{"sync", p.backend.kindName(kind), "elapsed", now.Sub(start),
		"services", len(p.committed)}, p.backend.describe(p.committed)...)...)
	return nil
}

// planSync decides how much the sync starting now does: a rewrite when one
// is needed, a full sync when one is due, else a partial one; and once per
// sync period the backend checks that its rules are still there, which may
// make it more.
func (p *Proxier) planSync(start time.Time) syncKind {
	kind := partialSync
	switch {
	case p.needRewrite:
		kind = rewriteSync
	case start.Sub(p.lastFullSync) >= p.fullSyncPeriod:
		kind = fullSync
	}
	kind, checked := p.backend.plan(kind, start.Sub(p.lastTableCheck) >= p.syncPeriod)
	if checked {
		p.lastTableCheck = start
	}
	return kind
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

// renderServices renders the services to write, sorted by
// name: all of them (and those to remove) when all is set, the changed ones
// otherwise.
func (p *Proxier) renderServices(changed map[types.NamespacedName]bool, all bool) ([]types.NamespacedName, map[types.NamespacedName]*renderedService) {
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
		renders[name] = p.render(name)
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
	return p.backend.render(svc, p.slices[name], p.policy, p.committed[name])
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
