package proxier

import (
	"context"
	"errors"
	"maps"
	"slices"
	"sort"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"sigs.k8s.io/knftables"

	"github.com/mcsd-io/mcsd/proxier/netfilter"
)

// staleChainDelay is how long a chain stays flushed before it is deleted.
// Before kernel 6.2 the kernel notices only a moment later that a chain a
// deleted map element pointed to is no longer referenced, and refuses to
// delete it until then.
const staleChainDelay = time.Second

// nftablesBackend is nftables mode: one table per family, written in one
// nft transaction per sync. It remembers which shared chains the committed
// services use and with what rules, the map and set elements it wrote, and
// the chains it flushed, so that no sync lists the table.
type nftablesBackend struct {
	family  v1.IPFamily
	words   words
	static  staticOptions
	nft     knftables.Interface
	metrics *metrics
	logger  klog.Logger
	// ruleCounter counts a chain's rules for the periodic check.
	ruleCounter netfilter.RuleCounter
	elements    *elementStore
	// chainUsers counts the committed service ports that point to each
	// shared chain and chainRules holds its rules; staleChains holds those
	// flushed when their count fell to zero, to be deleted later.
	chainUsers  map[string]int
	chainRules  map[string][]string
	staleChains map[string]time.Time
	// repair are the chains the check of a full sync found changed, to be
	// rewritten by its transaction.
	repair []string
}

// nftablesService is what one ServiceImport puts in the nftables table:
// elements of the static maps and sets, and the shared chains they point
// to, with their rules.
type nftablesService struct {
	chains   map[string][]string
	elements []element
}

// nftRules is r's nftables part; nil for nil.
func nftRules(r *renderedService) *nftablesService {
	if r == nil {
		return nil
	}
	return r.rules.(*nftablesService)
}

func newNFTablesBackend(family v1.IPFamily, nft knftables.Interface, counter netfilter.RuleCounter, o staticOptions, m *metrics, logger klog.Logger) *nftablesBackend {
	return &nftablesBackend{
		family:      family,
		words:       o.words,
		static:      o,
		nft:         nft,
		metrics:     m,
		logger:      logger,
		ruleCounter: counter,
		elements:    newElementStore(logger, elementsPerCommand(nft)),
		chainUsers:  map[string]int{},
		chainRules:  map[string][]string{},
		staleChains: map[string]time.Time{},
	}
}

// elementsPerCommand is how many map or set elements one nft command
// carries: many with nft, one with knftables.Fake (recognised by its Dump
// method), which would store a batch as a single element.
func elementsPerCommand(nft knftables.Interface) int {
	if _, fake := nft.(interface{ Dump() string }); fake {
		return 1
	}
	return 1000
}

func (b *nftablesBackend) mode() Mode { return ModeNFTables }

// plan checks, once per sync period, that the table is still there (a
// rewrite puts it back), and on a full sync counts the rules of every chain
// to repair those changed behind the proxier's back; a chain gone
// altogether takes a rewrite.
func (b *nftablesBackend) plan(kind syncKind, checkDue bool) (syncKind, bool) {
	b.repair = nil
	checked := kind != rewriteSync && checkDue
	if checked && !b.tableIntact() {
		return rewriteSync, true
	}
	if kind == fullSync {
		var missing bool
		if b.repair, missing = b.chainsToRepair(); missing {
			b.repair = nil
			return rewriteSync, checked
		}
	}
	return kind, checked
}

func (b *nftablesBackend) kindName(kind syncKind) string {
	return [...]string{partialSync: "partial", fullSync: "resync", rewriteSync: "rewrite"}[kind]
}

// rendersAll: a full sync renders only what changed, like a partial one,
// so it costs about as little and holds no change back; only a rewrite
// renders every service.
func (b *nftablesBackend) rendersAll(kind syncKind) bool { return kind == rewriteSync }

func (b *nftablesBackend) tidy(now time.Time) error {
	if len(b.staleChains) == 0 {
		return nil
	}
	return b.deleteStaleChains(now)
}

func (b *nftablesBackend) render(svc *serviceInfo, slices []*sliceInfo, pol trafficPolicy, prev *renderedService) *renderedService {
	return render(svc, slices, pol, b.words, prev)
}

// write adds to one transaction the static table (on a rewrite, after
// deleting the table with all it holds), the repairs the plan found, and
// the changes of the services, and runs it.
func (b *nftablesBackend) write(s *syncWrite) error {
	rewrite := s.kind == rewriteSync
	tx := b.nft.NewTransaction()
	if rewrite {
		writeStatic(tx, b.static, true)
		b.elements.reset()
		clear(b.chainUsers)
		clear(b.staleChains)
	}
	b.repairChains(tx, b.repair)
	users, rules := b.writeServices(tx, s)

	kind := b.kindName(s.kind)
	b.logger.V(2).Info("Syncing nftables rules", "sync", kind, "services", len(s.names), "operations", tx.NumOperations())
	if logger := b.logger.V(9); logger.Enabled() {
		logger.Info("Running nftables transaction", "transaction", tx.String())
	}
	if tx.NumOperations() == 0 {
		// A resync that found every chain intact, with no change to apply.
	} else if err := b.nft.Run(context.Background(), tx); err != nil {
		b.logger.Error(err, "nftables sync failed; the next sync rewrites the whole table", "sync", kind)
		if logger := b.logger.V(4); logger.Enabled() {
			logger.Info("Failed nftables transaction", "transaction", tx.String())
		}
		b.metrics.syncFailures.WithLabelValues(string(b.family)).Inc()
		// The element store already counts this transaction's changes and
		// staleChains its flushes: start over.
		b.elements.reset()
		clear(b.staleChains)
		return err
	}
	b.chainUsers, b.chainRules = users, rules
	return nil
}

func (b *nftablesBackend) dropped(map[types.NamespacedName]*renderedService) int {
	return b.elements.count(noEndpointServicesMap, dropVerdict)
}

func (b *nftablesBackend) describe(map[types.NamespacedName]*renderedService) []any {
	return []any{"servicePorts", b.elements.len(serviceIPsMap) + b.elements.len(noEndpointServicesMap)}
}

// writeServices adds to tx the changes that take the given services from
// their committed state to renders, in an order nftables accepts: shared
// chains before the elements that point to them. A shared chain is written
// when its first user comes (every used one on a rewrite) and
// flushed when its last user goes, to be deleted a moment later. It returns
// the number of users and the rules of each shared chain once tx is
// committed.
func (b *nftablesBackend) writeServices(tx *knftables.Transaction, s *syncWrite) (map[string]int, map[string][]string) {
	names, renders, rewrite, now := s.names, s.renders, s.kind == rewriteSync, s.start
	users := maps.Clone(b.chainUsers)
	rules := maps.Clone(b.chainRules)
	if rewrite {
		clear(rules)
	}
	for _, name := range names {
		old, cur := nftRules(s.committed[name]), nftRules(renders[name])
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
			if b.chainUsers[c] > 0 {
				gone = append(gone, c)
			}
		case rewrite || b.chainUsers[c] == 0:
			written = append(written, c)
		default:
			if _, stale := b.staleChains[c]; stale {
				written = append(written, c)
			}
		}
	}
	sort.Strings(written)
	sort.Strings(gone)
	for _, c := range written {
		tx.Add(&knftables.Chain{Name: c})
		tx.Flush(&knftables.Chain{Name: c})
		delete(b.staleChains, c)
	}
	for _, c := range written {
		for _, rule := range rules[c] {
			tx.Add(&knftables.Rule{Chain: c, Rule: rule})
		}
	}
	for _, name := range names {
		old, cur := nftRules(s.committed[name]), nftRules(renders[name])
		var oldElements, curElements []element
		if old != nil && !rewrite {
			oldElements = old.elements
		}
		if cur != nil {
			curElements = cur.elements
		}
		b.elements.diff(oldElements, curElements)
	}
	b.elements.write(tx)
	for _, c := range gone {
		tx.Flush(&knftables.Chain{Name: c})
		b.staleChains[c] = now
	}
	return users, rules
}

// chainsToRepair counts the rules of each static and shared chain through
// the RuleCounter and returns those whose count differs from what was
// written (someone flushed them, or added or deleted a rule), and whether a
// static chain is gone altogether, which only a rewrite repairs. A rule
// changed in place, keeping the count, goes unnoticed until the next
// rewrite.
func (b *nftablesBackend) chainsToRepair() (repair []string, missing bool) {
	want := map[string]int{}
	for _, bc := range baseChains {
		want[bc.name] = 0
	}
	for _, c := range staticChains {
		want[c] = 0
	}
	for _, r := range staticRules(b.static) {
		want[r.Chain]++
	}
	for c, rules := range b.chainRules {
		want[c] = len(rules)
	}
	for _, c := range slices.Sorted(maps.Keys(want)) {
		n, err := b.ruleCounter.CountRules(b.family, c)
		switch {
		case errors.Is(err, netfilter.ErrNotFound) && b.chainRules[c] == nil:
			b.logger.Info("A chain of the nftables table was deleted behind the proxier's back; rewriting the table", "chain", c)
			return nil, true
		case err != nil || n != want[c]:
			b.logger.Info("A chain of the nftables table was changed behind the proxier's back; rewriting it", "chain", c, "rules", n, "want", want[c], "err", err)
			repair = append(repair, c)
		}
	}
	return repair, false
}

// repairChains adds to tx a rewrite of each of chains from the committed
// state.
func (b *nftablesBackend) repairChains(tx *knftables.Transaction, chains []string) {
	if len(chains) == 0 {
		return
	}
	static := map[string][]*knftables.Rule{}
	for _, r := range staticRules(b.static) {
		static[r.Chain] = append(static[r.Chain], r)
	}
	for _, c := range chains {
		chain := staticChain(c)
		tx.Add(chain)
		tx.Flush(chain)
		if rules, ok := b.chainRules[c]; ok {
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
func (b *nftablesBackend) deleteStaleChains(now time.Time) error {
	tx := b.nft.NewTransaction()
	var deleted []string
	for chain, since := range b.staleChains {
		if now.Sub(since) >= staleChainDelay {
			deleted = append(deleted, chain)
		}
	}
	if len(deleted) == 0 {
		return nil
	}
	sort.Strings(deleted)
	for _, chain := range deleted {
		tx.Delete(&knftables.Chain{Name: chain})
		delete(b.staleChains, chain)
	}
	b.logger.V(4).Info("Deleting stale nftables chains", "chains", len(deleted))
	if err := b.nft.Run(context.Background(), tx); err != nil {
		// Perhaps someone deleted them; a full sync lists the table and
		// finds what is left.
		b.logger.Error(err, "Could not delete stale nftables chains; the next sync rewrites the whole table", "chains", len(deleted))
		b.metrics.cleanupFailures.WithLabelValues(string(b.family)).Inc()
		return err
	}
	return nil
}

// tableIntact reports whether the table still holds what the last sync
// wrote, judged by one base chain: someone who flushed or deleted the table
// (an operator, a firewall reload) took its jump to the services chain with
// it. Partial syncs trust the state kept in memory and would never notice,
// so once per sync period the proxier looks at that one chain (through a
// RuleCounter, a netlink dump of the chain alone, on a real host) and
// rewrites the whole table when it is gone.
//
// It looks at the kernel, but only at one chain: the ruleset is never listed.
func (b *nftablesBackend) tableIntact() bool {
	n, err := b.ruleCounter.CountRules(b.family, natPreroutingChain)
	switch {
	case knftables.IsNotFound(err), errors.Is(err, netfilter.ErrNotFound):
		b.logger.Info("The nftables table or its base chain was deleted behind the proxier's back; rewriting it", "chain", natPreroutingChain)
		return false
	case err != nil:
		// nft itself failing is reported by the next transaction.
		b.logger.V(2).Info("Could not check the nftables table", "err", err)
		return true
	case n == 0:
		b.logger.Info("The nftables table was flushed behind the proxier's back; rewriting it", "chain", natPreroutingChain)
		return false
	}
	return true
}
