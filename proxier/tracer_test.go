package proxier

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"

	"sigs.k8s.io/knftables"
)

// strictFake is a knftables.Fake that refuses what the kernel refuses and
// the Fake lets through: adding an existing map key with another value, and
// leaving a rule or map element that refers to a set or chain that is gone
// (the kernel refuses to delete what is still referenced). It also counts
// the calls that read the ruleset.
type strictFake struct {
	*knftables.Fake
	t testing.TB

	mu    sync.Mutex
	lists int
	runs  int
}

func newStrictFake(t testing.TB, family knftables.Family) *strictFake {
	return &strictFake{Fake: knftables.NewFake(family, TableName), t: t}
}

func (f *strictFake) Run(ctx context.Context, tx *knftables.Transaction) error {
	f.mu.Lock()
	f.runs++
	f.mu.Unlock()
	if err := f.checkElements(tx); err != nil {
		f.t.Errorf("transaction the kernel would refuse: %v\n%s", err, tx)
		return err
	}
	f.Fake.RLock()
	oldTables, oldTable := f.Fake.Tables, f.Fake.Table
	f.Fake.RUnlock()
	if err := f.Fake.Run(ctx, tx); err != nil {
		return err
	}
	if err := f.checkReferences(); err != nil {
		f.Fake.Lock()
		f.Fake.Tables, f.Fake.Table = oldTables, oldTable
		f.Fake.Unlock()
		f.t.Errorf("transaction the kernel would refuse: %v\n%s", err, tx)
		return err
	}
	return nil
}

func (f *strictFake) ListAll(ctx context.Context) (map[string][]string, error) {
	f.countList()
	return f.Fake.ListAll(ctx)
}

func (f *strictFake) List(ctx context.Context, objectType string) ([]string, error) {
	f.countList()
	return f.Fake.List(ctx, objectType)
}

func (f *strictFake) ListRules(ctx context.Context, chain string) ([]*knftables.Rule, error) {
	f.countList()
	return f.Fake.ListRules(ctx, chain)
}

func (f *strictFake) ListElements(ctx context.Context, objectType, name string) ([]*knftables.Element, error) {
	f.countList()
	return f.Fake.ListElements(ctx, objectType, name)
}

func (f *strictFake) countList() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lists++
}

func (f *strictFake) listCalls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.lists
}

// checkElements replays tx's element operations against the current maps.
func (f *strictFake) checkElements(tx *knftables.Transaction) error {
	f.Fake.RLock()
	defer f.Fake.RUnlock()
	values := map[string]map[string]string{} // map -> key -> value, as the transaction goes
	current := func(m string) map[string]string {
		if values[m] == nil {
			values[m] = map[string]string{}
			if f.Fake.Table != nil && f.Fake.Table.Maps[m] != nil {
				for _, e := range f.Fake.Table.Maps[m].Elements {
					values[m][strings.Join(e.Key, " . ")] = strings.Join(e.Value, " . ")
				}
			}
		}
		return values[m]
	}
	for _, line := range strings.Split(tx.String(), "\n") {
		fields := strings.Fields(line)
		if len(fields) < 5 {
			continue
		}
		verb, kind, name := fields[0], fields[1], fields[4]
		switch {
		case kind == "map" && verb == "flush":
			values[name] = map[string]string{}
		case kind == "map" && verb == "delete":
			delete(values, name)
		case kind == "element" && (verb == "add" || verb == "delete"):
			body := strings.TrimSuffix(strings.TrimPrefix(strings.Join(fields[5:], " "), "{ "), " }")
			key, value, isMap := strings.Cut(body, " : ")
			m := current(name)
			if verb == "delete" {
				delete(m, key)
				continue
			}
			if !isMap {
				continue
			}
			if old, ok := m[key]; ok && old != value {
				return fmt.Errorf("map %s already has key %q with value %q; adding value %q needs a delete first", name, key, old, value)
			}
			m[key] = value
		}
	}
	return nil
}

// checkReferences finds rules and map elements that refer to missing chains
// or sets.
func (f *strictFake) checkReferences() error {
	f.Fake.RLock()
	defer f.Fake.RUnlock()
	table := f.Fake.Table
	if table == nil {
		return nil
	}
	check := func(where, text string) error {
		words := strings.Fields(text)
		for i, w := range words {
			if name, ok := strings.CutPrefix(w, "@"); ok && name != "" {
				if table.Sets[name] == nil && table.Maps[name] == nil {
					return fmt.Errorf("%s refers to missing set %q", where, name)
				}
			}
			if (w == "goto" || w == "jump") && i+1 < len(words) {
				if table.Chains[words[i+1]] == nil {
					return fmt.Errorf("%s refers to missing chain %q", where, words[i+1])
				}
			}
		}
		return nil
	}
	for name, chain := range table.Chains {
		for _, r := range chain.Rules {
			if err := check("a rule in chain "+name, r.Rule); err != nil {
				return err
			}
		}
	}
	for name, m := range table.Maps {
		for _, e := range m.Elements {
			if err := check("an element of map "+name, strings.Join(e.Value, " ")); err != nil {
				return err
			}
		}
	}
	return nil
}

// packet is what the tracer sends through the rules.
type packet struct {
	src, dst netip.Addr
	proto    string // "tcp", "udp", "sctp" or "icmp"
	dport    int
	// fromHost sends the packet from a process of the node itself (the
	// output path) instead of from a pod or another host (forward path).
	fromHost bool
}

// outcome is one way a packet can go: one numgen branch.
type outcome struct {
	// verdict is "dnat" (sent to endpoint), "reject", "drop", or
	// "accept" (passed through untouched).
	verdict  string
	endpoint string
	// masquerade says whether the packet leaves with the node's address.
	masquerade bool
	// affinity is the key this path records in the affinity set, as
	// "client . ClusterSetIP . protocol . port . index".
	affinity string
	// trail lists the rules that acted, for failure messages.
	trail []string
	// weight is the probability of this outcome, where the tracer knows
	// it (the iptables tracer; the nftables one leaves it zero).
	weight float64
}

func (o outcome) String() string {
	s := o.verdict
	if o.endpoint != "" {
		s += " " + o.endpoint
	}
	if o.masquerade {
		s += " masquerade"
	}
	return s
}

// tracer follows packets through the Fake's rules, taking every branch of
// every numgen. It understands exactly the rule shapes the proxier writes
// and fails on anything else, so the two cannot drift apart.
type tracer struct {
	t   testing.TB
	nft *knftables.Fake
	// affinity holds the keys the affinity set remembers; the Fake has no
	// packet path to fill it.
	affinity map[string]bool
}

func newTracer(t testing.TB, nft *knftables.Fake) *tracer {
	return &tracer{t: t, nft: nft, affinity: map[string]bool{}}
}

// remember records the key o's path updates in the affinity set, as the
// kernel does when that path is taken.
func (tr *tracer) remember(o outcome) {
	if o.affinity == "" {
		tr.t.Fatalf("outcome %v records no affinity", o)
	}
	tr.affinity[o.affinity] = true
}

// forget empties the affinity set, as its timeout does.
func (tr *tracer) forget() { clear(tr.affinity) }

// traceState is a packet on its way, with what happened to it so far.
type traceState struct {
	pkt        packet
	mark       uint32
	dnat       bool
	endpoint   string
	masquerade bool
	affinity   string
	verdict    string // set once a terminal statement ran
	trail      []string
	// weight is the probability of this path, where the tracer knows it
	// (the iptables tracer's statistic matches).
	weight float64
}

// trace sends pkt through the nat hook before routing, the filter hook and
// postrouting, and returns every outcome.
func (tr *tracer) trace(pkt packet) []outcome {
	tr.t.Helper()
	tr.nft.RLock()
	defer tr.nft.RUnlock()
	natChain, filterChain := natPreroutingChain, filterForwardChain
	if pkt.fromHost {
		natChain, filterChain = natOutputChain, filterOutputChain
	}
	var outs []outcome
	for _, st := range tr.hook(natChain, traceState{pkt: pkt}) {
		if st.verdict == "drop" || st.verdict == "reject" {
			outs = append(outs, st.outcome())
			continue
		}
		st.verdict = ""
		for _, st := range tr.hook(filterChain, st) {
			if st.verdict == "drop" || st.verdict == "reject" {
				outs = append(outs, st.outcome())
				continue
			}
			st.verdict = ""
			for _, st := range tr.hook(natPostroutingChain, st) {
				outs = append(outs, st.outcome())
			}
		}
	}
	return outs
}

func (st traceState) outcome() outcome {
	o := outcome{verdict: st.verdict, endpoint: st.endpoint, masquerade: st.masquerade, affinity: st.affinity, trail: st.trail, weight: st.weight}
	if o.verdict == "" || o.verdict == "accept" {
		o.verdict = "accept"
		if st.dnat {
			o.verdict = "dnat"
		}
	}
	return o
}

// hook runs a base chain; a packet that falls off its end is accepted.
func (tr *tracer) hook(chain string, st traceState) []traceState {
	if tr.nft.Table == nil || tr.nft.Table.Chains[chain] == nil {
		return []traceState{st}
	}
	var out []traceState
	for _, r := range tr.chain(chain, st) {
		if r.verdict == "" {
			r.verdict = "accept"
		}
		out = append(out, r)
	}
	return out
}

// chain runs a chain; states that fall off its end come back with no
// verdict (a return).
func (tr *tracer) chain(name string, st traceState) []traceState {
	ch := tr.nft.Table.Chains[name]
	if ch == nil {
		tr.t.Fatalf("packet jumps to missing chain %q", name)
	}
	return tr.rules(name, ch.Rules, 0, st)
}

// rules runs rules[i:] on st.
func (tr *tracer) rules(chain string, rules []*knftables.Rule, i int, st traceState) []traceState {
	if i == len(rules) {
		return []traceState{st}
	}
	var out []traceState
	for _, step := range tr.rule(chain, rules[i].Rule, st) {
		switch {
		case step.next == "":
			if step.st.verdict != "" {
				out = append(out, step.st)
			} else {
				out = append(out, tr.rules(chain, rules, i+1, step.st)...)
			}
		case strings.HasPrefix(step.next, "goto "):
			out = append(out, tr.chain(strings.TrimPrefix(step.next, "goto "), step.st)...)
		case strings.HasPrefix(step.next, "jump "):
			for _, r := range tr.chain(strings.TrimPrefix(step.next, "jump "), step.st) {
				if r.verdict != "" {
					out = append(out, r)
				} else {
					out = append(out, tr.rules(chain, rules, i+1, r)...)
				}
			}
		}
	}
	return out
}

// step is one way a rule can end: go on with next ("", or "goto X" or
// "jump X"), or with a verdict in st.
type step struct {
	st   traceState
	next string
}

// rule evaluates one rule on st. A rule that does not match returns st
// unchanged.
func (tr *tracer) rule(chain, text string, st traceState) []step {
	tr.t.Helper()
	words := strings.Fields(text)
	st.trail = append(slices.Clone(st.trail), chain+": "+text)
	fail := func(format string, args ...any) []step {
		tr.t.Fatalf("tracer does not understand rule %q in chain %s: %s", text, chain, fmt.Sprintf(format, args...))
		return nil
	}
	noMatch := []step{{st: traceState{}, next: ""}}
	noMatch[0].st = st
	noMatch[0].st.trail = st.trail[:len(st.trail)-1]

	for i := 0; i < len(words); {
		w := words[i]
		switch {
		case w == "ct" && i+2 < len(words) && words[i+1] == "state" && words[i+2] == "new":
			i += 3
		case w == "ct" && i+2 < len(words) && words[i+1] == "status" && words[i+2] == "dnat":
			if !st.dnat {
				return noMatch
			}
			i += 3
		case w == "mark" && i+4 < len(words) && words[i+1] == "and" && words[i+3] == "!=" && words[i+4] == "0":
			if st.mark&parseMark(tr.t, words[i+2]) == 0 {
				return noMatch
			}
			i += 5
		case w == "mark" && i+4 < len(words) && words[i+1] == "set" && words[i+2] == "mark":
			m := parseMark(tr.t, words[i+4])
			switch words[i+3] {
			case "or":
				st.mark |= m
			case "xor":
				st.mark ^= m
			default:
				return fail("mark operation %q", words[i+3])
			}
			i += 5
		case isSelector(words, i):
			keys, n := tr.concat(words, i, st)
			if n == 0 || len(keys) != 1 {
				return fail("selector at %q", strings.Join(words[i:], " "))
			}
			i += n
			key := keys[0]
			if key == "" {
				// "tcp dport" on a packet of another protocol.
				return noMatch
			}
			if i >= len(words) {
				return fail("selector without a match")
			}
			switch {
			case words[i] == "vmap" && i+1 < len(words) && strings.HasPrefix(words[i+1], "@"):
				verdict, ok := tr.mapLookup(strings.TrimPrefix(words[i+1], "@"), key)
				if !ok {
					return noMatch
				}
				if i+2 != len(words) {
					return fail("words after a vmap")
				}
				return tr.verdict(st, verdict)
			case strings.HasPrefix(words[i], "@"):
				if !tr.setHas(strings.TrimPrefix(words[i], "@"), key) {
					return noMatch
				}
				i++
			case words[i] == "!=" && i+1 < len(words) && words[i+1] == "{":
				end := slices.Index(words[i:], "}")
				if end < 0 {
					return fail("unterminated set")
				}
				if inAnonymousSet(tr.t, key, words[i+2:i+end]) {
					return noMatch
				}
				i += end + 1
			default:
				if key != words[i] {
					return noMatch
				}
				i++
			}
		case w == "update" && i+3 < len(words) && words[i+1] == "@"+affinitySet && words[i+2] == "{":
			keys, n := tr.concat(words, i+3, st)
			j := i + 3 + n
			if n == 0 || len(keys) != 1 || keys[0] == "" || j+3 > len(words) || words[j] != "timeout" || words[j+2] != "}" {
				return fail("update")
			}
			st.affinity = keys[0]
			i = j + 3
		case w == "numgen":
			branches, n := tr.numgen(words, i)
			if n == 0 {
				return fail("numgen")
			}
			if words[i+4] != "vmap" || i+n != len(words) {
				return fail("numgen outside a vmap or dnat")
			}
			var out []step
			for _, b := range branches {
				out = append(out, tr.verdict(st, b)...)
			}
			return out
		case w == "dnat":
			return tr.dnat(words[i:], st, fail)
		case w == "masquerade":
			if i+1 < len(words) && words[i+1] != "fully-random" {
				return fail("masquerade option")
			}
			st.masquerade = true
			st.verdict = "accept"
			return []step{{st: st}}
		case w == "reject" || w == "drop" || w == "accept":
			st.verdict = w
			return []step{{st: st}}
		case w == "goto" || w == "jump":
			if i+2 != len(words) {
				return fail("words after %s", w)
			}
			return []step{{st: st, next: w + " " + words[i+1]}}
		default:
			return fail("unknown word %q", w)
		}
	}
	return []step{{st: st}}
}

// verdict applies a verdict map value or a numgen branch to st.
func (tr *tracer) verdict(st traceState, v string) []step {
	switch {
	case strings.HasPrefix(v, "goto ") || strings.HasPrefix(v, "jump "):
		return []step{{st: st, next: v}}
	case v == "drop" || v == "accept" || v == "reject":
		st.verdict = v
		return []step{{st: st}}
	}
	tr.t.Fatalf("tracer does not understand verdict %q", v)
	return nil
}

// dnat handles "dnat ip to <key> map @backends-<proto>", where the key may end in
// "numgen random mod N": every branch is taken.
func (tr *tracer) dnat(words []string, st traceState, fail func(string, ...any) []step) []step {
	if len(words) < 6 || (words[1] != "ip" && words[1] != "ip6") || words[2] != "to" {
		return fail("dnat form")
	}
	keys, n := tr.concat(words, 3, st)
	if n == 0 || 3+n+2 != len(words) || words[3+n] != "map" || !strings.HasPrefix(words[4+n], "@"+backendsMapPrefix) {
		return fail("dnat map")
	}
	var out []step
	for _, key := range keys {
		if key == "" {
			return []step{{st: st}}
		}
		value, ok := tr.mapLookup(strings.TrimPrefix(words[4+n], "@"), key)
		if !ok {
			tr.t.Errorf("no backend for %q: a packet taking this branch is not DNATed", key)
			continue
		}
		addr, port, ok := strings.Cut(value, " . ")
		if !ok {
			return fail("backend value %q", value)
		}
		a := netip.MustParseAddr(addr)
		p, _ := strconv.Atoi(port)
		s := st
		ap := netip.AddrPortFrom(a, uint16(p))
		s.dnat, s.endpoint, s.verdict = true, ap.String(), "accept"
		s.pkt.dst, s.pkt.dport = ap.Addr(), int(ap.Port())
		out = append(out, step{st: s})
	}
	return out
}

// concat evaluates the concatenation of selectors at words[i:] and returns
// its values (one per branch of a "numgen random mod N" in it) and the
// number of words used. A value is empty when a protocol's selector ("tcp
// dport") meets a packet of another protocol: the rule does not match.
func (tr *tracer) concat(words []string, i int, st traceState) ([]string, int) {
	keys := []string{""}
	start := i
	mismatch := false
	for {
		var values []string
		var n int
		if i+3 < len(words) && words[i] == "numgen" && words[i+1] == "random" && words[i+2] == "mod" {
			mod, err := strconv.Atoi(words[i+3])
			if err != nil || mod < 1 {
				return nil, 0
			}
			n = 4
			offset := 0
			if i+5 < len(words) && words[i+4] == "offset" {
				if offset, err = strconv.Atoi(words[i+5]); err != nil {
					return nil, 0
				}
				n = 6
			}
			for k := 0; k < mod; k++ {
				values = append(values, strconv.Itoa(offset+k))
			}
		} else {
			v, m := tr.selector(words, i, st)
			if m == 0 {
				return nil, 0
			}
			if v == "" {
				mismatch = true
			}
			values, n = []string{v}, m
		}
		var next []string
		for _, k := range keys {
			for _, v := range values {
				if k == "" {
					next = append(next, v)
				} else {
					next = append(next, k+" . "+v)
				}
			}
		}
		keys = next
		i += n
		if i < len(words) && words[i] == "." {
			i++
			continue
		}
		break
	}
	if mismatch {
		return []string{""}, i - start
	}
	return keys, i - start
}

// numgen parses "numgen random mod N (map|vmap) { 0 : v , ... }" at words[i:]
// and returns the values of every branch and the number of words used. It
// fails the test when the map does not cover 0..N-1: a missing value lets
// some packets through untouched.
func (tr *tracer) numgen(words []string, i int) ([]string, int) {
	if len(words) < i+6 || words[i+1] != "random" || words[i+2] != "mod" || words[i+5] != "{" {
		return nil, 0
	}
	n, err := strconv.Atoi(words[i+3])
	if err != nil || n < 1 {
		return nil, 0
	}
	end := slices.Index(words[i:], "}")
	if end < 0 {
		return nil, 0
	}
	body := strings.Join(words[i+6:i+end], " ")
	values := map[int]string{}
	for _, entry := range strings.Split(body, " , ") {
		idx, value, ok := strings.Cut(entry, " : ")
		if !ok {
			return nil, 0
		}
		k, err := strconv.Atoi(idx)
		if err != nil {
			return nil, 0
		}
		values[k] = value
	}
	branches := make([]string, n)
	for k := 0; k < n; k++ {
		v, ok := values[k]
		if !ok {
			tr.t.Errorf("numgen mod %d has no value for %d: %q", n, k, strings.Join(words[i:i+end+1], " "))
		}
		branches[k] = v
	}
	if len(values) != n {
		tr.t.Errorf("numgen mod %d has %d values", n, len(values))
	}
	return branches, end + 1
}

func isSelector(words []string, i int) bool {
	if i+1 >= len(words) {
		return false
	}
	switch words[i] + " " + words[i+1] {
	case "ip daddr", "ip saddr", "ip6 daddr", "ip6 saddr", "meta l4proto", "th dport", "tcp dport", "udp dport", "sctp dport":
		return true
	}
	return false
}

// selector returns the value of the selector at words[i:] and its length.
func (tr *tracer) selector(words []string, i int, st traceState) (string, int) {
	if !isSelector(words, i) {
		return "", 0
	}
	switch words[i+1] {
	case "daddr":
		return st.pkt.dst.String(), 2
	case "saddr":
		return st.pkt.src.String(), 2
	case "l4proto":
		return st.pkt.proto, 2
	case "dport":
		if words[i] != "th" && words[i] != st.pkt.proto {
			return "", 2
		}
		return strconv.Itoa(st.pkt.dport), 2
	}
	return "", 0
}

func (tr *tracer) mapLookup(name, key string) (string, bool) {
	m := tr.nft.Table.Maps[name]
	if m == nil {
		tr.t.Fatalf("lookup in missing map %q", name)
	}
	e := m.FindElement(strings.Split(key, " . ")...)
	if e == nil {
		return "", false
	}
	return strings.Join(e.Value, " . "), true
}

func (tr *tracer) setHas(name, key string) bool {
	if name == affinitySet {
		if tr.nft.Table.Sets[name] == nil {
			tr.t.Fatalf("lookup in missing set %q", name)
		}
		return tr.affinity[key]
	}
	s := tr.nft.Table.Sets[name]
	if s == nil {
		tr.t.Fatalf("lookup in missing set %q", name)
	}
	return s.FindElement(strings.Split(key, " . ")...) != nil
}

// inAnonymousSet matches an address against "{ a/n, b/m }" members.
func inAnonymousSet(t testing.TB, key string, members []string) bool {
	addr, err := netip.ParseAddr(key)
	if err != nil {
		t.Fatalf("anonymous set match on %q", key)
	}
	for _, m := range members {
		m = strings.TrimSuffix(m, ",")
		if prefix, err := netip.ParsePrefix(m); err == nil {
			if prefix.Contains(addr) {
				return true
			}
		} else if a, err := netip.ParseAddr(m); err == nil && a == addr {
			return true
		}
	}
	return false
}

func parseMark(t testing.TB, s string) uint32 {
	v, err := strconv.ParseUint(s, 0, 32)
	if err != nil {
		t.Fatalf("bad mark %q", s)
	}
	return uint32(v)
}

// endpoints returns the sorted distinct endpoints outcomes reach; it fails
// the test if any outcome is not a DNAT.
func endpoints(t testing.TB, outs []outcome) []string {
	t.Helper()
	seen := map[string]bool{}
	for _, o := range outs {
		if o.verdict != "dnat" {
			t.Fatalf("packet was not sent to an endpoint on every branch: %v\ntrail: %s", o, strings.Join(o.trail, "\n  "))
		}
		seen[o.endpoint] = true
	}
	list := make([]string, 0, len(seen))
	for e := range seen {
		list = append(list, e)
	}
	sort.Strings(list)
	return list
}

// verdicts returns the sorted distinct verdicts of outcomes.
func verdicts(outs []outcome) []string {
	seen := map[string]bool{}
	for _, o := range outs {
		seen[o.verdict] = true
	}
	var list []string
	for v := range seen {
		list = append(list, v)
	}
	sort.Strings(list)
	return list
}
