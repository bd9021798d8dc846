package proxier

import (
	"net/netip"
	"strconv"
	"strings"
	"testing"
)

// iptTracer follows packets through a fakeIPTables' rules, taking both ways
// of every statistic match with their probabilities. Like the nftables
// tracer it understands exactly the rule shapes the proxier writes and fails
// on anything else.
type iptTracer struct {
	t testing.TB
	f *fakeIPTables
	// recent holds "list client" for each client a recent list remembers;
	// the fake has no packet path to fill it.
	recent map[string]bool
}

func newIPTTracer(t testing.TB, f *fakeIPTables) *iptTracer {
	return &iptTracer{t: t, f: f, recent: map[string]bool{}}
}

// remember records the client o's path sets in a recent list, as the kernel
// does when that path is taken.
func (tr *iptTracer) remember(o outcome) {
	if o.affinity == "" {
		tr.t.Fatalf("outcome %v records no affinity", o)
	}
	tr.recent[o.affinity] = true
}

// iptState is a packet on its way through the iptables rules.
type iptState struct {
	traceState
	marked bool
	// returned is set when the packet fell off the end of a chain or hit
	// RETURN: the calling chain goes on.
	returned bool
}

// trace sends pkt through nat PREROUTING (OUTPUT for the host's own), filter
// FORWARD (OUTPUT) and nat POSTROUTING, and returns every outcome.
func (tr *iptTracer) trace(pkt packet) []outcome {
	tr.t.Helper()
	tr.f.mu.Lock()
	defer tr.f.mu.Unlock()
	natChain, filterChain := "PREROUTING", "FORWARD"
	if pkt.fromHost {
		natChain, filterChain = "OUTPUT", "OUTPUT"
	}
	var outs []outcome
	start := iptState{traceState: traceState{pkt: pkt, weight: 1}}
	for _, st := range tr.hook(iptablesNAT, natChain, start) {
		for _, st := range tr.hook(iptablesFilter, filterChain, st) {
			if st.verdict == "drop" || st.verdict == "reject" {
				outs = append(outs, st.outcome())
				continue
			}
			for _, st := range tr.hook(iptablesNAT, "POSTROUTING", st) {
				outs = append(outs, st.outcome())
			}
		}
	}
	return outs
}

// hook runs a built-in chain; its policy accepts.
func (tr *iptTracer) hook(table, chain string, st iptState) []iptState {
	var out []iptState
	for _, s := range tr.rules(table, chain, 0, st) {
		if s.verdict == "accept" {
			s.verdict = ""
		}
		s.returned = false
		out = append(out, s)
	}
	return out
}

// rules runs the rules of chain from the i-th.
func (tr *iptTracer) rules(table, chain string, i int, st iptState) []iptState {
	rules := tr.f.tables[table].chains[chain]
	if i >= len(rules) {
		st.returned = true
		return []iptState{st}
	}
	var out []iptState
	for _, m := range tr.match(rules[i], st) {
		s := m.state
		if !m.matched {
			out = append(out, tr.rules(table, chain, i+1, s)...)
			continue
		}
		s.trail = append(s.trail, table+" "+chain+": "+rules[i])
		target, args := m.target, m.args
		switch target {
		case "":
			out = append(out, tr.rules(table, chain, i+1, s)...)
		case "RETURN":
			s.returned = true
			out = append(out, s)
		case "MARK":
			s.marked = args[0] == "--or-mark"
			out = append(out, tr.rules(table, chain, i+1, s)...)
		case "DNAT":
			ap := netip.MustParseAddrPort(args[1])
			s.dnat, s.endpoint = true, ap.String()
			s.pkt.dst, s.pkt.dport = ap.Addr(), int(ap.Port())
			s.verdict = "accept"
			out = append(out, s)
		case "MASQUERADE":
			s.masquerade = true
			s.verdict = "accept"
			out = append(out, s)
		case "REJECT":
			s.verdict = "reject"
			out = append(out, s)
		case "DROP":
			s.verdict = "drop"
			out = append(out, s)
		default:
			for _, sub := range tr.rules(table, target, 0, s) {
				if sub.returned {
					sub.returned = false
					out = append(out, tr.rules(table, chain, i+1, sub)...)
				} else {
					out = append(out, sub)
				}
			}
		}
	}
	return out
}

// matchResult is one way a rule can go for a packet.
type matchResult struct {
	state   iptState
	matched bool
	target  string
	args    []string
}

// match evaluates a rule's matches against st.
func (tr *iptTracer) match(rule string, st iptState) []matchResult {
	tr.t.Helper()
	w := splitRule(rule)
	fail := func(format string, args ...any) []matchResult {
		tr.t.Fatalf("rule %q: "+format, append([]any{rule}, args...)...)
		return nil
	}
	results := []matchResult{{state: st, matched: true}}
	// narrow keeps the results that still match and applies f to them.
	narrow := func(f func(*matchResult) bool) {
		var kept []matchResult
		for _, r := range results {
			if r.matched && !f(&r) {
				r.matched = false
			}
			kept = append(kept, r)
		}
		results = kept
	}
	for i := 0; i < len(w); i++ {
		switch w[i] {
		case "-d", "-s":
			prefix := netip.MustParsePrefix(w[i+1])
			addr := st.pkt.dst
			if w[i] == "-s" {
				addr = st.pkt.src
			}
			narrow(func(*matchResult) bool { return prefix.Contains(addr) })
			i++
		case "-p":
			proto := w[i+1]
			narrow(func(*matchResult) bool { return st.pkt.proto == proto })
			i++
		case "-m":
			i++
			switch w[i] {
			case "tcp", "udp", "sctp":
				if i+1 < len(w) && w[i+1] == "--dport" {
					port, _ := strconv.Atoi(w[i+2])
					narrow(func(*matchResult) bool { return st.pkt.dport == port })
					i += 2
				}
			case "comment":
				i += 2
			case "conntrack":
				// Every traced packet is a connection's first.
				i += 2
			case "statistic":
				if w[i+1] != "--mode" || w[i+2] != "random" || w[i+3] != "--probability" {
					return fail("unknown statistic match")
				}
				p, err := strconv.ParseFloat(w[i+4], 64)
				if err != nil {
					return fail("bad probability")
				}
				var split []matchResult
				for _, r := range results {
					if !r.matched {
						split = append(split, r)
						continue
					}
					yes, no := r, r
					yes.state.weight *= p
					no.state.weight *= 1 - p
					no.matched = false
					split = append(split, yes, no)
				}
				results = split
				i += 4
			case "recent":
				name, key := "", ""
				set := false
				for i+1 < len(w) && strings.HasPrefix(w[i+1], "--") {
					i++
					switch w[i] {
					case "--name":
						name = w[i+1]
						i++
					case "--seconds":
						i++
					case "--set":
						set = true
					case "--rcheck", "--update", "--reap":
					default:
						return fail("unknown recent option %s", w[i])
					}
				}
				key = name + " " + st.pkt.src.String()
				if set {
					narrow(func(r *matchResult) bool { r.state.affinity = key; return true })
				} else {
					narrow(func(*matchResult) bool { return tr.recent[key] })
				}
			case "mark":
				if w[i+1] != "!" || w[i+2] != "--mark" {
					return fail("unknown mark match")
				}
				narrow(func(r *matchResult) bool { return !r.state.marked })
				i += 3
			default:
				return fail("unknown match %s", w[i])
			}
		case "-j":
			target, args := w[i+1], w[i+2:]
			if target == "DNAT" && (len(args) != 2 || args[0] != "--to-destination") {
				return fail("bad DNAT")
			}
			narrow(func(r *matchResult) bool { r.target, r.args = target, args; return true })
			i = len(w)
		default:
			return fail("unknown word %q", w[i])
		}
	}
	return results
}

// splitRule splits a rule into words, a double-quoted string being one.
func splitRule(rule string) []string {
	var words []string
	for rule = strings.TrimSpace(rule); rule != ""; rule = strings.TrimSpace(rule) {
		if rule[0] == '"' {
			end := strings.IndexByte(rule[1:], '"') + 1
			words = append(words, rule[1:end])
			rule = rule[end+1:]
			continue
		}
		word, rest, _ := strings.Cut(rule, " ")
		words = append(words, word)
		rule = rest
	}
	return words
}

// shares sums the weight of the outcomes that reach each endpoint.
func shares(outs []outcome) map[string]float64 {
	s := map[string]float64{}
	for _, o := range outs {
		s[o.endpoint] += o.weight
	}
	return s
}
