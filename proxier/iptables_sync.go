package proxier

import (
	"bytes"
	"context"
	"maps"
	"slices"

	"k8s.io/apimachinery/pkg/types"
)

// syncIPTablesRules brings the iptables rules up to date with one
// iptables-restore per table, in kube-proxy iptables mode's manner.
//
// Every sync rewrites the chains that do not belong to one service
// (MCSD-SERVICES in both tables among them: one rule per ClusterSetIP
// port, as kube-proxy's KUBE-SERVICES) and only the service-port and
// endpoint chains of the services that changed; the others are not
// declared in the input, so "--noflush" leaves them as they are. A full sync
// (every FullSyncPeriod, or after the jump check found a jump gone) writes
// every chain and makes sure the jumps from the built-in chains are there. A
// rewrite (the first sync, one after a failure) is a full sync that also
// lists the proxier's chains once to delete those an earlier run left
// behind. No other sync reads the kernel's rules: what was committed is kept
// in memory.
func (p *Proxier) syncIPTablesRules() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.initialized.Load() {
		p.logger.V(2).Info("Not syncing iptables until ServiceImports and EndpointSlices have synced")
		return nil
	}
	ctx := context.Background()
	start := p.clock.Now()
	rewrite := p.needRewrite
	full := rewrite || start.Sub(p.lastFullSync) >= p.fullSyncPeriod
	if !full && start.Sub(p.lastTableCheck) >= p.syncPeriod {
		p.lastTableCheck = start
		if !p.iptablesJumpPresent(ctx) {
			full = true
		}
	}
	changes := p.tracker.checkout()
	changed := p.applyChanges(changes)
	if !full && len(changed) == 0 {
		p.synced()
		return nil
	}

	names, renders := p.renderServices(changed, full, p.renderIPTables)

	var leftovers map[string][]string
	if rewrite {
		var err error
		if leftovers, err = p.iptablesChains(ctx); err != nil {
			return p.iptablesFailed(err, "rewrite")
		}
	}
	kind := "partial"
	switch {
	case rewrite:
		kind = "rewrite"
	case full:
		kind = "full"
	}
	nat, filter := p.iptablesRestoreInput(names, renders, full, leftovers)
	p.logger.V(2).Info("Syncing iptables rules", "sync", kind, "services", len(names), "natBytes", len(nat), "filterBytes", len(filter))
	if logger := p.logger.V(9); logger.Enabled() {
		logger.Info("Running iptables-restore", "nat", string(nat), "filter", string(filter))
	}
	// nat first: a port that gains endpoints is DNATed before its reject
	// goes, so no new connection is refused on the way.
	if err := p.ipt.Restore(ctx, iptablesNAT, nat); err != nil {
		if logger := p.logger.V(4); logger.Enabled() {
			logger.Info("Failed iptables-restore input", "table", iptablesNAT, "input", string(nat))
		}
		return p.iptablesFailed(err, kind)
	}
	if err := p.ipt.Restore(ctx, iptablesFilter, filter); err != nil {
		if logger := p.logger.V(4); logger.Enabled() {
			logger.Info("Failed iptables-restore input", "table", iptablesFilter, "input", string(filter))
		}
		return p.iptablesFailed(err, kind)
	}
	if full {
		if err := p.ensureIPTablesJumps(ctx); err != nil {
			return p.iptablesFailed(err, kind)
		}
	}

	p.commit(names, renders, full, start)

	now := p.clock.Now()
	p.observeSync(start, now, full, changes)
	dropped := 0
	for _, r := range p.committed {
		dropped += r.iptables.dropped
	}
	p.metrics.noLocalEndpoints.WithLabelValues("internal", string(p.family)).Set(float64(dropped))
	p.synced()
	p.logger.V(2).Info("Synced iptables rules", "sync", kind, "elapsed", now.Sub(start), "services", len(p.committed))
	return nil
}

// renderIPTables computes a service's rules, or nil when it has none (see
// render).
func (p *Proxier) renderIPTables(name types.NamespacedName) *renderedService {
	svc := p.services[name]
	if svc == nil || !p.ownsVIP(name, svc) {
		return nil
	}
	return renderIPTables(svc, p.slices[name], p.policy, p.iptOptions)
}

// iptablesFailed counts and logs a failed sync, and makes the next one a
// rewrite: part of it may have applied.
func (p *Proxier) iptablesFailed(err error, kind string) error {
	p.logger.Error(err, "iptables sync failed; the next sync rewrites every chain", "sync", kind)
	p.metrics.iptablesRestoreFailures.WithLabelValues(string(p.family)).Inc()
	p.needRewrite = true
	return err
}

// iptablesRestoreInput returns the iptables-restore input of the nat and the
// filter table that takes the rules from the committed state to renders of
// names (every service on a full sync). leftovers are the proxier's chains
// found in the kernel, per table, to be deleted unless still in use.
func (p *Proxier) iptablesRestoreInput(names []types.NamespacedName, renders map[types.NamespacedName]*renderedService,
	full bool, leftovers map[string][]string) (nat, filter []byte) {
	// The services as they are once this sync is committed, in a stable
	// order for MCSD-SERVICES.
	after := func(name types.NamespacedName) *renderedService {
		if r, ok := renders[name]; ok {
			return r
		}
		return p.committed[name]
	}
	all := names
	if !full {
		set := make(map[types.NamespacedName]bool, len(p.committed)+len(names))
		for name := range p.committed {
			set[name] = true
		}
		for _, name := range names {
			set[name] = true
		}
		all = slices.SortedFunc(maps.Keys(set), compareNames)
	}

	// Service chains to write (every one in use on a full sync, those of
	// the changed services otherwise) and to delete.
	written := map[string][]string{}
	deleted := map[string]bool{}
	for _, name := range names {
		if r := renders[name]; r != nil {
			maps.Copy(written, r.iptables.chains)
		}
		if old := p.committed[name]; old != nil {
			for c := range old.iptables.chains {
				deleted[c] = true
			}
		}
	}
	for _, c := range leftovers[iptablesNAT] {
		deleted[c] = true
	}
	for c := range written {
		delete(deleted, c)
	}
	for _, c := range iptablesStaticChains[iptablesNAT] {
		delete(deleted, c)
	}

	var b bytes.Buffer
	static := iptablesStaticRules(p.iptOptions, iptablesNAT)
	b.WriteString("*nat\n")
	writtenNames := slices.Sorted(maps.Keys(written))
	deletedNames := slices.Sorted(maps.Keys(deleted))
	for _, chains := range [][]string{iptablesStaticChains[iptablesNAT], writtenNames, deletedNames} {
		for _, c := range chains {
			b.WriteString(":" + c + " - [0:0]\n")
		}
	}
	for _, c := range iptablesStaticChains[iptablesNAT] {
		appendRules(&b, c, static[c])
	}
	for _, name := range all {
		if r := after(name); r != nil {
			appendRules(&b, iptServicesChain, r.iptables.natServices)
		}
	}
	for _, c := range writtenNames {
		appendRules(&b, c, written[c])
	}
	for _, c := range deletedNames {
		b.WriteString("-X " + c + "\n")
	}
	b.WriteString("COMMIT\n")
	nat = bytes.Clone(b.Bytes())

	// The filter table holds no chain of one service: all of it is
	// written every time.
	b.Reset()
	static = iptablesStaticRules(p.iptOptions, iptablesFilter)
	b.WriteString("*filter\n")
	stale := map[string]bool{}
	for _, c := range leftovers[iptablesFilter] {
		stale[c] = true
	}
	for _, c := range iptablesStaticChains[iptablesFilter] {
		delete(stale, c)
	}
	staleNames := slices.Sorted(maps.Keys(stale))
	for _, chains := range [][]string{iptablesStaticChains[iptablesFilter], staleNames} {
		for _, c := range chains {
			b.WriteString(":" + c + " - [0:0]\n")
		}
	}
	appendRules(&b, iptFilterChain, static[iptFilterChain])
	for _, name := range all {
		if r := after(name); r != nil {
			appendRules(&b, iptServicesChain, r.iptables.filterServices)
			appendRules(&b, iptFilterChain, []string{r.iptables.filterVIP})
		}
	}
	appendRules(&b, iptRejectChain, static[iptRejectChain])
	for _, c := range staleNames {
		b.WriteString("-X " + c + "\n")
	}
	b.WriteString("COMMIT\n")
	return nat, b.Bytes()
}

func appendRules(b *bytes.Buffer, chain string, rules []string) {
	for _, r := range rules {
		b.WriteString("-A ")
		b.WriteString(chain)
		b.WriteByte(' ')
		b.WriteString(r)
		b.WriteByte('\n')
	}
}

// iptablesChains lists the proxier's chains in each table, for a rewrite to
// delete those of an earlier run.
func (p *Proxier) iptablesChains(ctx context.Context) (map[string][]string, error) {
	out := map[string][]string{}
	for _, table := range []string{iptablesNAT, iptablesFilter} {
		chains, err := p.ipt.ListChains(ctx, table)
		if err != nil {
			return nil, err
		}
		for _, c := range chains {
			if isIPTablesChain(c) {
				out[table] = append(out[table], c)
			}
		}
	}
	return out, nil
}

// ensureIPTablesJumps puts back any jump from a built-in chain that is gone.
func (p *Proxier) ensureIPTablesJumps(ctx context.Context) error {
	for _, j := range iptablesJumps {
		existed, err := p.ipt.EnsureRule(ctx, j.table, j.chain, j.args...)
		if err != nil {
			return err
		}
		if !existed && !p.lastFullSync.IsZero() {
			p.logger.Info("A jump to the proxier's chains was gone; added it again", "table", j.table, "chain", j.chain)
		}
	}
	return nil
}

// iptablesJumpPresent checks, as the nftables table check does, that the
// jump from nat PREROUTING is still there: a firewall reload or an
// "iptables -t nat -F" removes it along with the proxier's rules. One
// "iptables -C", whatever the number of services.
func (p *Proxier) iptablesJumpPresent(ctx context.Context) bool {
	for _, j := range iptablesJumps {
		if j.table != iptablesNAT || j.chain != "PREROUTING" {
			continue
		}
		existed, err := p.ipt.EnsureRule(ctx, j.table, j.chain, j.args...)
		if err != nil || !existed {
			p.logger.Info("The jump to the proxier's chains was gone or could not be checked; rewriting every chain",
				"table", j.table, "chain", j.chain, "err", err)
			return false
		}
	}
	return true
}
