package proxier

import (
	"bytes"
	"context"
	"maps"
	"slices"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/mcsd-io/mcsd/proxier/netfilter"
)

// iptablesBackend is iptables mode, in kube-proxy iptables mode's manner:
// one iptables-restore per table and sync.
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
type iptablesBackend struct {
	family  v1.IPFamily
	options iptablesOptions
	ipt     netfilter.IPTables
	metrics *metrics
	logger  klog.Logger
	// jumpsWritten is set once the jumps from the built-in chains were
	// first made sure of: one gone after that was removed by someone else.
	jumpsWritten bool
}

// iptRules is r's iptables part; nil for nil.
func iptRules(r *renderedService) *iptablesService {
	if r == nil {
		return nil
	}
	return r.rules.(*iptablesService)
}

func (b *iptablesBackend) mode() Mode { return ModeIPTables }

// plan checks, once per sync period between full syncs, that the jump from
// nat PREROUTING is still there; a full sync puts back what is gone.
func (b *iptablesBackend) plan(kind syncKind, checkDue bool) (syncKind, bool) {
	if kind != partialSync || !checkDue {
		return kind, false
	}
	if !b.iptablesJumpPresent(context.Background()) {
		return fullSync, true
	}
	return kind, true
}

func (b *iptablesBackend) kindName(kind syncKind) string {
	return [...]string{partialSync: "partial", fullSync: "full", rewriteSync: "rewrite"}[kind]
}

// rendersAll: a full sync writes every chain, so it renders every service.
func (b *iptablesBackend) rendersAll(kind syncKind) bool { return kind != partialSync }

func (b *iptablesBackend) tidy(time.Time) error { return nil }

func (b *iptablesBackend) render(svc *serviceInfo, slices []*sliceInfo, pol trafficPolicy, _ *renderedService) *renderedService {
	return renderIPTables(svc, slices, pol, b.options)
}

// write restores the nat table, then the filter table: a port that gains
// endpoints is DNATed before its reject goes, so no new connection is
// refused on the way. A rewrite first lists the proxier's chains, to
// delete an earlier run's; a full sync then makes sure of the jumps.
func (b *iptablesBackend) write(s *syncWrite) error {
	ctx := context.Background()
	kind := b.kindName(s.kind)
	var leftovers map[string][]string
	if s.kind == rewriteSync {
		var err error
		if leftovers, err = b.iptablesChains(ctx); err != nil {
			return b.failed(err, kind)
		}
	}
	nat := b.natInput(s, leftovers[iptablesNAT])
	filter := b.filterInput(s, leftovers[iptablesFilter])
	b.logger.V(2).Info("Syncing iptables rules", "sync", kind, "services", len(s.names), "natBytes", len(nat), "filterBytes", len(filter))
	if logger := b.logger.V(9); logger.Enabled() {
		logger.Info("Running iptables-restore", "nat", string(nat), "filter", string(filter))
	}
	for _, t := range []struct {
		table string
		input []byte
	}{{iptablesNAT, nat}, {iptablesFilter, filter}} {
		if err := b.ipt.Restore(ctx, t.table, t.input); err != nil {
			if logger := b.logger.V(4); logger.Enabled() {
				logger.Info("Failed iptables-restore input", "table", t.table, "input", string(t.input))
			}
			return b.failed(err, kind)
		}
	}
	if s.kind != partialSync {
		if err := b.ensureIPTablesJumps(ctx); err != nil {
			return b.failed(err, kind)
		}
		b.jumpsWritten = true
	}
	return nil
}

// failed counts and logs a failed sync; the core makes the next one a
// rewrite, since part of it may have applied.
func (b *iptablesBackend) failed(err error, kind string) error {
	b.logger.Error(err, "iptables sync failed; the next sync rewrites every chain", "sync", kind)
	b.metrics.iptablesRestoreFailures.WithLabelValues(string(b.family)).Inc()
	return err
}

func (b *iptablesBackend) dropped(committed map[types.NamespacedName]*renderedService) int {
	n := 0
	for _, r := range committed {
		n += iptRules(r).dropped
	}
	return n
}

func (b *iptablesBackend) describe(map[types.NamespacedName]*renderedService) []any { return nil }

// natInput is the iptables-restore input of the nat table that takes the
// rules from the committed state to the sync's renders: the static chains
// and MCSD-SERVICES whole, the service chains of the services rendered
// (every one in use on a full sync), and the deletion of service chains no
// longer used and of leftovers, the proxier's nat chains found in the
// kernel.
func (b *iptablesBackend) natInput(s *syncWrite, leftovers []string) []byte {
	written := map[string][]string{}
	deleted := map[string]bool{}
	for _, name := range s.names {
		if r := iptRules(s.renders[name]); r != nil {
			maps.Copy(written, r.chains)
		}
		if old := iptRules(s.committed[name]); old != nil {
			for c := range old.chains {
				deleted[c] = true
			}
		}
	}
	for _, c := range leftovers {
		deleted[c] = true
	}
	for c := range written {
		delete(deleted, c)
	}
	for _, c := range iptablesStaticChains[iptablesNAT] {
		delete(deleted, c)
	}
	writtenNames := slices.Sorted(maps.Keys(written))
	deletedNames := slices.Sorted(maps.Keys(deleted))

	var buf bytes.Buffer
	static := iptablesStaticRules(b.options, iptablesNAT)
	buf.WriteString("*nat\n")
	declareChains(&buf, iptablesStaticChains[iptablesNAT], writtenNames, deletedNames)
	for _, c := range iptablesStaticChains[iptablesNAT] {
		appendRules(&buf, c, static[c])
	}
	for _, name := range allServices(s) {
		if r := iptRules(s.after(name)); r != nil {
			appendRules(&buf, iptServicesChain, r.natServices)
		}
	}
	for _, c := range writtenNames {
		appendRules(&buf, c, written[c])
	}
	deleteChains(&buf, deletedNames)
	return buf.Bytes()
}

// filterInput is the iptables-restore input of the filter table, which
// holds no chain of one service: all of it is written every time, and
// leftovers, the proxier's filter chains found in the kernel, are deleted
// unless static.
func (b *iptablesBackend) filterInput(s *syncWrite, leftovers []string) []byte {
	stale := map[string]bool{}
	for _, c := range leftovers {
		stale[c] = true
	}
	for _, c := range iptablesStaticChains[iptablesFilter] {
		delete(stale, c)
	}
	staleNames := slices.Sorted(maps.Keys(stale))

	var buf bytes.Buffer
	static := iptablesStaticRules(b.options, iptablesFilter)
	buf.WriteString("*filter\n")
	declareChains(&buf, iptablesStaticChains[iptablesFilter], staleNames)
	appendRules(&buf, iptFilterChain, static[iptFilterChain])
	for _, name := range allServices(s) {
		if r := iptRules(s.after(name)); r != nil {
			appendRules(&buf, iptServicesChain, r.filterServices)
			appendRules(&buf, iptFilterChain, []string{r.filterVIP})
		}
	}
	appendRules(&buf, iptRejectChain, static[iptRejectChain])
	deleteChains(&buf, staleNames)
	return buf.Bytes()
}

// allServices are the services once the sync is committed, in a stable
// order for MCSD-SERVICES: those rendered, on a full sync, which renders
// every one; else those rendered and those committed before.
func allServices(s *syncWrite) []types.NamespacedName {
	if s.kind != partialSync {
		return s.names
	}
	set := make(map[types.NamespacedName]bool, len(s.committed)+len(s.names))
	for name := range s.committed {
		set[name] = true
	}
	for _, name := range s.names {
		set[name] = true
	}
	return slices.SortedFunc(maps.Keys(set), compareNames)
}

// declareChains declares (and so flushes) every chain of each list.
func declareChains(buf *bytes.Buffer, lists ...[]string) {
	for _, chains := range lists {
		for _, c := range chains {
			buf.WriteString(":" + c + " - [0:0]\n")
		}
	}
}

// deleteChains deletes the chains, and ends the table's input.
func deleteChains(buf *bytes.Buffer, chains []string) {
	for _, c := range chains {
		buf.WriteString("-X " + c + "\n")
	}
	buf.WriteString("COMMIT\n")
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
func (b *iptablesBackend) iptablesChains(ctx context.Context) (map[string][]string, error) {
	out := map[string][]string{}
	for _, table := range []string{iptablesNAT, iptablesFilter} {
		chains, err := b.ipt.ListChains(ctx, table)
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
func (b *iptablesBackend) ensureIPTablesJumps(ctx context.Context) error {
	for _, j := range iptablesJumps {
		existed, err := b.ipt.EnsureRule(ctx, j.table, j.chain, j.args...)
		if err != nil {
			return err
		}
		if !existed && b.jumpsWritten {
			b.logger.Info("A jump to the proxier's chains was gone; added it again", "table", j.table, "chain", j.chain)
		}
	}
	return nil
}

// iptablesJumpPresent checks, as the nftables table check does, that the
// jump from nat PREROUTING is still there: a firewall reload or an
// "iptables -t nat -F" removes it along with the proxier's rules. One
// "iptables -C", whatever the number of services.
func (b *iptablesBackend) iptablesJumpPresent(ctx context.Context) bool {
	for _, j := range iptablesJumps {
		if j.table != iptablesNAT || j.chain != "PREROUTING" {
			continue
		}
		existed, err := b.ipt.EnsureRule(ctx, j.table, j.chain, j.args...)
		if err != nil || !existed {
			b.logger.Info("The jump to the proxier's chains was gone or could not be checked; rewriting every chain",
				"table", j.table, "chain", j.chain, "err", err)
			return false
		}
	}
	return true
}
