package proxier

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/knftables"
)

// baseChain is a chain hooked into netfilter.
type baseChain struct {
	name     string
	kind     knftables.BaseChainType
	hook     knftables.BaseChainHook
	priority knftables.BaseChainPriority
}

// baseChains are the proxier's hooks into netfilter; README.md says why each
// one sits where it does. Priorities are the standard ones, so a CNI's own
// tables can run before (seeing ClusterSetIPs) or after (seeing endpoints).
var baseChains = []baseChain{
	{filterInputChain, knftables.FilterType, knftables.InputHook, knftables.FilterPriority},
	{filterForwardChain, knftables.FilterType, knftables.ForwardHook, knftables.FilterPriority},
	{filterOutputChain, knftables.FilterType, knftables.OutputHook, knftables.FilterPriority},
	{natPreroutingChain, knftables.NATType, knftables.PreroutingHook, knftables.DNATPriority},
	{natOutputChain, knftables.NATType, knftables.OutputHook, knftables.DNATPriority},
	{natPostroutingChain, knftables.NATType, knftables.PostroutingHook, knftables.SNATPriority},
}

// jump is a rule in a base chain that jumps to one of the static chains.
type jump struct {
	from, to string
	// match limits the jump: the filter checks only need a connection's
	// first packet, since later ones belong to a connection that was let
	// through.
	match string
}

// jumps wire the base chains to the static chains. The "no endpoints" and
// "unserved port" rejects cannot sit in prerouting (reject is not allowed
// there before kernel 5.9), so they run in the filter hooks that every path
// through the node crosses: forward (pods, other hosts), output (this host)
// and, for the endpoints check, input (a ClusterSetIP that is also a local
// address).
var jumps = []jump{
	{filterInputChain, endpointsCheckChain, "ct state new"},
	{filterForwardChain, endpointsCheckChain, "ct state new"},
	{filterForwardChain, clustersetIPsCheckChain, "ct state new"},
	{filterOutputChain, endpointsCheckChain, "ct state new"},
	{filterOutputChain, clustersetIPsCheckChain, "ct state new"},
	{natPreroutingChain, servicesChain, ""},
	{natOutputChain, servicesChain, ""},
	{natPostroutingChain, masqueradingChain, ""},
}

// staticChains are the regular chains the base chains jump to.
var staticChains = []string{servicesChain, endpointsCheckChain, clustersetIPsCheckChain, rejectChain, masqueradingChain}

// staticContainers are the maps and sets every sync keeps in step with the
// services; their elements are diffed against what was committed.
var staticContainers = []string{serviceIPsMap, noEndpointServicesMap, clustersetIPsSet, hairpinConnectionsSet,
	backendsMapName("tcp"), backendsMapName("udp"), backendsMapName("sctp")}

// maxEndpoints is the most endpoints one service port balances over: the
// range of the index in a backends map's key. Further endpoints are left out.
const maxEndpoints = 65536

// affinityMaxClients bounds affinitySet. The kernel's default for a dynamic
// set, 65535, is one endpoint's worth in kube-proxy's layout, where each
// endpoint has a set; here one set serves every service.
const affinityMaxClients = 1 << 20

// words are the nftables words that differ between the two families.
type words struct {
	ip       string // "ip" or "ip6"
	addrType string // "ipv4_addr" or "ipv6_addr"
}

// index is the expression of an endpoint index in the backends maps' and
// affinitySet's keys, as their typeof declares it; "numgen random mod 1
// offset i" is how a rule writes the constant i (constIndex), since nft
// 1.0.6 cannot type a bare number there.
const index = "numgen random mod 65536"

func familyWords(family v1.IPFamily) words {
	if family == v1.IPv6Protocol {
		return words{ip: "ip6", addrType: "ipv6_addr"}
	}
	return words{ip: "ip", addrType: "ipv4_addr"}
}

// staticOptions are the settings the static rules depend on.
type staticOptions struct {
	words
	// mark is the masquerade mark, as "0x..." .
	mark string
	// masqueradeAll marks all traffic to ClusterSetIPs for masquerading.
	masqueradeAll bool
	// podCIDRs of this family: traffic to ClusterSetIPs from elsewhere is
	// masqueraded.
	podCIDRs []string
}

// writeStatic adds to tx the table and everything in it that does not depend
// on the services, replacing whatever rules the static chains held. rewrite
// deletes the table first, with all it holds: leftovers of an earlier run,
// base chains of other hook priorities, and anything changed behind the
// proxier's back go without the ruleset having to be listed.
func writeStatic(tx *knftables.Transaction, o staticOptions, rewrite bool) {
	table := &knftables.Table{Comment: ptr.To("mcsd: ClusterSetIPs of multi-cluster services")}
	if rewrite {
		tx.Add(table)
		tx.Delete(table)
	}
	tx.Add(table)
	for _, bc := range baseChains {
		tx.Add(staticChain(bc.name))
		tx.Flush(staticChain(bc.name))
	}
	for _, name := range staticChains {
		tx.Add(staticChain(name))
		tx.Flush(staticChain(name))
	}

	verdictMap := o.addrType + " . inet_proto . inet_service : verdict"
	tx.Add(&knftables.Map{Name: serviceIPsMap, Type: verdictMap,
		Comment: ptr.To("ClusterSetIP . protocol . port -> service port chain")})
	tx.Add(&knftables.Map{Name: noEndpointServicesMap, Type: verdictMap,
		Comment: ptr.To("ClusterSetIP . protocol . port -> reject or drop, for ports without endpoints")})
	tx.Add(&knftables.Set{Name: clustersetIPsSet, Type: o.addrType,
		Comment: ptr.To("every programmed ClusterSetIP")})
	tx.Add(&knftables.Set{Name: hairpinConnectionsSet, Type: o.addrType + " . " + o.addrType + " . inet_proto . inet_service",
		Comment: ptr.To("local endpoint . itself . protocol . port: hairpin connections")})
	// Typed by typeof, because no type name fits an index. One map per
	// protocol, because the value's port must name the protocol of the
	// rules that use it: nft 1.0.6 refuses a "udp dport" rule on a map
	// whose value says "tcp dport", or "th dport" ("conflicting protocols
	// specified").
	for _, proto := range []string{"tcp", "udp", "sctp"} {
		tx.Add(&knftables.Map{Name: backendsMapName(proto),
			TypeOf:  o.ip + " daddr . " + proto + " dport . " + index + " : " + o.ip + " daddr . " + proto + " dport",
			Comment: ptr.To("ClusterSetIP . port . index -> endpoint address . port, for " + strings.ToUpper(proto))})
	}
	tx.Add(&knftables.Set{Name: affinitySet,
		TypeOf:  o.ip + " saddr . " + o.ip + " daddr . meta l4proto . tcp dport . " + index,
		Flags:   []knftables.SetFlag{knftables.DynamicFlag, knftables.TimeoutFlag},
		Size:    ptr.To[uint64](affinityMaxClients),
		Comment: ptr.To("client . ClusterSetIP . protocol . port . endpoint index, for ClientIP affinity")})

	for _, r := range staticRules(o) {
		tx.Add(r)
	}
}

// staticChain is the chain object of a static or base chain, with its hook
// for a base chain.
func staticChain(name string) *knftables.Chain {
	for _, bc := range baseChains {
		if bc.name == name {
			return &knftables.Chain{Name: bc.name, Type: ptr.To(bc.kind), Hook: ptr.To(bc.hook), Priority: ptr.To(bc.priority)}
		}
	}
	return &knftables.Chain{Name: name}
}

// staticRules are the rules of the base and static chains, in order.
func staticRules(o staticOptions) []*knftables.Rule {
	var rules []*knftables.Rule
	add := func(r *knftables.Rule) { rules = append(rules, r) }
	for _, j := range jumps {
		add(&knftables.Rule{Chain: j.from, Rule: strings.TrimSpace(j.match + " jump " + j.to)})
	}

	// Rejects: a TCP reset for TCP (an immediate ECONNREFUSED), ICMP port
	// unreachable for the rest.
	add(&knftables.Rule{Chain: rejectChain, Rule: "meta l4proto tcp reject with tcp reset"})
	add(&knftables.Rule{Chain: rejectChain, Rule: "reject"})
	add(&knftables.Rule{Chain: endpointsCheckChain,
		Rule: o.ip + " daddr . meta l4proto . th dport vmap @" + noEndpointServicesMap})
	add(&knftables.Rule{Chain: clustersetIPsCheckChain,
		Rule:    o.ip + " daddr @" + clustersetIPsSet + " goto " + rejectChain,
		Comment: ptr.To("port not served by the ClusterSetIP")})

	markMasquerade := "mark set mark or " + o.mark
	switch {
	case o.masqueradeAll:
		add(&knftables.Rule{Chain: servicesChain,
			Rule:    o.ip + " daddr @" + clustersetIPsSet + " " + markMasquerade,
			Comment: ptr.To("masquerade all ClusterSetIP traffic")})
	case len(o.podCIDRs) > 0:
		add(&knftables.Rule{Chain: servicesChain,
			Rule: o.ip + " daddr @" + clustersetIPsSet + " " + o.ip + " saddr != { " + strings.Join(o.podCIDRs, ", ") + " } " +
				markMasquerade,
			Comment: ptr.To("masquerade ClusterSetIP traffic from outside the pod network")})
	}
	add(&knftables.Rule{Chain: servicesChain,
		Rule: o.ip + " daddr . meta l4proto . th dport vmap @" + serviceIPsMap})

	add(&knftables.Rule{Chain: masqueradingChain,
		Rule: "mark and " + o.mark + " != 0 mark set mark xor " + o.mark + " masquerade fully-random"})
	add(&knftables.Rule{Chain: masqueradingChain,
		Rule: "ct status dnat " + o.ip + " saddr . " + o.ip + " daddr . meta l4proto . th dport @" + hairpinConnectionsSet +
			" masquerade fully-random"})
	return rules
}

// dropVerdict is the no-endpoint-services verdict of a port whose
// internalTrafficPolicy Local leaves it no endpoint while other clusters
// have some. kube-proxy drops such traffic rather than rejecting it: the
// service has endpoints, only none this node may use, and a reject would
// tell the client the service does not exist.
const dropVerdict = "drop"

// element is one element of a static map or set; key and value are their
// parts joined by " . ", value empty for a set.
type element struct {
	container string
	key       string
	value     string
}

// render computes the map elements and the shared chains they point to for
// svc given its slices. prev is what was committed for it (nil if nothing),
// so that endpoints keep their index. It is a pure function of its inputs.
func render(svc *serviceInfo, slices []*sliceInfo, pol trafficPolicy, w words, prev *renderedService) *renderedService {
	n := &nftablesService{chains: map[string][]string{}}
	r := &renderedService{vip: svc.vip, slots: map[portKey][]endpoint{}, rules: n}
	choices := make([]choice, len(svc.ports))
	size := 1
	for i, p := range svc.ports {
		choices[i] = pol.choose(svc, endpointsFor(p, slices))
		size += 1 + len(choices[i].endpoints)
	}
	n.elements = make([]element, 0, size)
	n.elements = append(n.elements, element{container: clustersetIPsSet, key: svc.vip})
	var buf []byte
	for i, p := range svc.ports {
		c := choices[i]
		proto := strings.ToLower(string(p.protocol))
		port := strconv.Itoa(int(p.port))
		key := svc.vip + " . " + proto + " . " + port
		pk := portKey{p.protocol, p.port}
		if len(c.endpoints) == 0 {
			r.slots[pk] = nil
			verdict := "goto " + rejectChain
			if c.dropped {
				verdict = dropVerdict
			}
			n.elements = append(n.elements, element{container: noEndpointServicesMap, key: key, value: verdict})
			continue
		}
		var before []endpoint
		if prev != nil {
			before = prev.slots[pk]
		}
		slots := assignSlots(before, c.endpoints)
		r.slots[pk] = slots
		r.endpoints += len(slots)
		// One allocation per string: a port of hundreds of endpoints is
		// rendered again whenever one of them changes, and at hundreds of
		// thousands of elements the garbage is most of a sync's cost.
		backends := backendsMapName(proto)
		prefix := svc.vip + " . " + port + " . "
		for i, e := range slots {
			buf = strconv.AppendInt(append(buf[:0], prefix...), int64(i), 10)
			key := string(buf)
			buf = strconv.AppendInt(append(e.ip.AppendTo(buf[:0]), " . "...), int64(e.port), 10)
			n.elements = append(n.elements, element{container: backends, key: key, value: string(buf)})
			if pol.isLocal(e) {
				ip := e.ip.String()
				n.elements = append(n.elements, element{container: hairpinConnectionsSet,
					key: ip + " . " + ip + " . " + proto + " . " + strconv.Itoa(int(e.port))})
			}
		}
		lb := lbChainName(proto, len(slots), svc.affinityTimeout)
		n.elements = append(n.elements, element{container: serviceIPsMap, key: key, value: "goto " + lb})
		if svc.affinityTimeout == 0 {
			n.chains[lb] = []string{dnatRule(w, proto, fmt.Sprintf("numgen random mod %d", len(slots)))}
			continue
		}
		// ClientIP affinity: a client remembered with index i goes back
		// to i; a new one is balanced over the backend chains, which
		// remember it.
		rules := make([]string, 0, len(slots)+1)
		targets := make([]string, len(slots))
		for i := range slots {
			backend := backendChainName(proto, i, svc.affinityTimeout)
			rules = append(rules, affinityKey(w, proto, i)+" @"+affinitySet+" goto "+backend)
			targets[i] = "goto " + backend
			n.chains[backend] = []string{
				"update @" + affinitySet + " { " + affinityKey(w, proto, i) + " timeout " +
					strconv.FormatInt(int64(svc.affinityTimeout/time.Second), 10) + "s }",
				dnatRule(w, proto, constIndex(i)),
			}
		}
		n.chains[lb] = append(rules, numgenVmap(targets))
	}
	return r
}

// assignSlots orders eps (sorted) for a backends map: an endpoint that had an
// index below len(eps) keeps it, and the others fill the free indices in
// order.
func assignSlots(before, eps []endpoint) []endpoint {
	if len(eps) > maxEndpoints {
		eps = eps[:maxEndpoints]
	}
	// Each endpoint's position in eps, then whether it was placed.
	at := make(map[netip.AddrPort]int, len(eps))
	for i, e := range eps {
		at[e.id()] = i
	}
	slots := make([]endpoint, len(eps))
	filled := make([]bool, len(eps))
	placed := make([]bool, len(eps))
	for i, e := range before[:min(len(before), len(slots))] {
		// The current copy: its readiness or node may have changed.
		if j, ok := at[e.id()]; ok {
			slots[i], filled[i] = eps[j], true
			placed[j] = true
		}
	}
	next := 0
	for j, e := range eps {
		if placed[j] {
			continue
		}
		for filled[next] {
			next++
		}
		slots[next], filled[next] = e, true
	}
	return slots
}

// dnatRule DNATs to the endpoint at index idx of the packet's service port
// in its protocol's backends map.
func dnatRule(w words, proto, idx string) string {
	return "dnat " + w.ip + " to " + w.ip + " daddr . " + proto + " dport . " + idx + " map @" + backendsMapName(proto)
}

// affinityKey is the packet's key in affinitySet for endpoint index i.
func affinityKey(w words, proto string, i int) string {
	return w.ip + " saddr . " + w.ip + " daddr . meta l4proto . " + proto + " dport . " + constIndex(i)
}

// constIndex is the index i as an expression of the index's type.
func constIndex(i int) string {
	if i == 0 {
		return "numgen random mod 1"
	}
	return "numgen random mod 1 offset " + strconv.Itoa(i)
}

// numgenVmap is "numgen random mod N vmap { 0 : t0 , 1 : t1 , ... }". It
// is only written in the few chains shared by affine service ports of one
// size: an anonymous map per service is what made loading slow.
func numgenVmap(targets []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "numgen random mod %d vmap { ", len(targets))
	for i, t := range targets {
		if i > 0 {
			b.WriteString(" , ")
		}
		b.WriteString(strconv.Itoa(i))
		b.WriteString(" : ")
		b.WriteString(t)
	}
	b.WriteString(" }")
	return b.String()
}
