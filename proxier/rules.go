package proxier

import (
	"fmt"
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
var staticContainers = []string{serviceIPsMap, noEndpointServicesMap, clustersetIPsSet, hairpinConnectionsSet}

// words are the nftables words that differ between the two families.
type words struct {
	ip       string // "ip" or "ip6"
	addrType string // "ipv4_addr" or "ipv6_addr"
}

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
// on the services, replacing whatever rules those chains held. resetBaseChains
// deletes and recreates the base chains first, so that a table left by
// another version with other hook priorities is corrected.
func writeStatic(tx *knftables.Transaction, o staticOptions, resetBaseChains bool) {
	tx.Add(&knftables.Table{Comment: ptr.To("mcsd: ClusterSetIPs of multi-cluster services")})
	if resetBaseChains {
		for _, bc := range baseChains {
			tx.Add(&knftables.Chain{Name: bc.name})
			tx.Delete(&knftables.Chain{Name: bc.name})
		}
	}
	for _, bc := range baseChains {
		c := &knftables.Chain{Name: bc.name, Type: ptr.To(bc.kind), Hook: ptr.To(bc.hook), Priority: ptr.To(bc.priority)}
		tx.Add(c)
		tx.Flush(c)
	}
	for _, name := range staticChains {
		tx.Add(&knftables.Chain{Name: name})
		tx.Flush(&knftables.Chain{Name: name})
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
	tx.Flush(&knftables.Map{Name: serviceIPsMap})
	tx.Flush(&knftables.Map{Name: noEndpointServicesMap})
	tx.Flush(&knftables.Set{Name: clustersetIPsSet})
	tx.Flush(&knftables.Set{Name: hairpinConnectionsSet})

	for _, j := range jumps {
		tx.Add(&knftables.Rule{Chain: j.from, Rule: strings.TrimSpace(j.match + " jump " + j.to)})
	}

	// Rejects: a TCP reset for TCP (an immediate ECONNREFUSED), ICMP port
	// unreachable for the rest.
	tx.Add(&knftables.Rule{Chain: rejectChain, Rule: "meta l4proto tcp reject with tcp reset"})
	tx.Add(&knftables.Rule{Chain: rejectChain, Rule: "reject"})
	tx.Add(&knftables.Rule{Chain: endpointsCheckChain,
		Rule: o.ip + " daddr . meta l4proto . th dport vmap @" + noEndpointServicesMap})
	tx.Add(&knftables.Rule{Chain: clustersetIPsCheckChain,
		Rule:    o.ip + " daddr @" + clustersetIPsSet + " goto " + rejectChain,
		Comment: ptr.To("port not served by the ClusterSetIP")})

	markMasquerade := "mark set mark or " + o.mark
	switch {
	case o.masqueradeAll:
		tx.Add(&knftables.Rule{Chain: servicesChain,
			Rule:    o.ip + " daddr @" + clustersetIPsSet + " " + markMasquerade,
			Comment: ptr.To("masquerade all ClusterSetIP traffic")})
	case len(o.podCIDRs) > 0:
		tx.Add(&knftables.Rule{Chain: servicesChain,
			Rule: o.ip + " daddr @" + clustersetIPsSet + " " + o.ip + " saddr != { " + strings.Join(o.podCIDRs, ", ") + " } " +
				markMasquerade,
			Comment: ptr.To("masquerade ClusterSetIP traffic from outside the pod network")})
	}
	tx.Add(&knftables.Rule{Chain: servicesChain,
		Rule: o.ip + " daddr . meta l4proto . th dport vmap @" + serviceIPsMap})

	tx.Add(&knftables.Rule{Chain: masqueradingChain,
		Rule: "mark and " + o.mark + " != 0 mark set mark xor " + o.mark + " masquerade fully-random"})
	tx.Add(&knftables.Rule{Chain: masqueradingChain,
		Rule: "ct status dnat " + o.ip + " saddr . " + o.ip + " daddr . meta l4proto . th dport @" + hairpinConnectionsSet +
			" masquerade fully-random"})
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

// renderedService is everything one ServiceImport puts in nftables: the
// outcome of render, kept after a successful sync as the committed state
// the next partial sync is diffed against.
type renderedService struct {
	vip string
	// chains maps each chain to its rules.
	chains map[string][]string
	// sets maps each affinity set to its timeout.
	sets     map[string]time.Duration
	elements []element
	// udp lists the endpoints each UDP port balances over, so that
	// conntrack entries of removed ones can be cleared.
	udp map[int32][]endpoint
	// endpoints counts the endpoints over all ports, for logs.
	endpoints int
}

// render computes the rules, sets and map elements for svc given its slices.
// It is a pure function of its inputs.
func render(svc *serviceInfo, slices []*sliceInfo, pol trafficPolicy, w words) *renderedService {
	r := &renderedService{
		vip:    svc.vip,
		chains: map[string][]string{},
		sets:   map[string]time.Duration{},
		udp:    map[int32][]endpoint{},
	}
	r.elements = append(r.elements, element{container: clustersetIPsSet, key: svc.vip})
	for _, p := range svc.ports {
		c := pol.choose(svc, endpointsFor(p, slices))
		proto := strings.ToLower(string(p.protocol))
		port := strconv.Itoa(int(p.port))
		key := svc.vip + " . " + proto + " . " + port
		if p.protocol == v1.ProtocolUDP {
			r.udp[p.port] = c.endpoints
		}
		if len(c.endpoints) == 0 {
			verdict := "goto " + rejectChain
			if c.dropped {
				verdict = dropVerdict
			}
			r.elements = append(r.elements, element{container: noEndpointServicesMap, key: key, value: verdict})
			continue
		}
		r.endpoints += len(c.endpoints)
		chain := serviceChainName(svc.name, p.protocol, p.port)
		r.elements = append(r.elements, element{container: serviceIPsMap, key: key, value: "goto " + chain})
		for _, e := range c.endpoints {
			if e.cluster == pol.localCluster {
				ip := e.ip.String()
				r.elements = append(r.elements, element{container: hairpinConnectionsSet,
					key: ip + " . " + ip + " . " + proto + " . " + strconv.Itoa(int(e.port))})
			}
		}
		if svc.affinityTimeout == 0 {
			r.chains[chain] = []string{dnatRule(w, proto, c.endpoints)}
			continue
		}
		// ClientIP affinity: a client seen recently (its address is in an
		// endpoint's set) goes back to that endpoint; a new one is balanced
		// over the endpoint chains, which record it.
		rules := make([]string, 0, len(c.endpoints)+1)
		targets := make([]string, len(c.endpoints))
		for i, e := range c.endpoints {
			epChain := endpointChainName(svc.name, p.protocol, p.port, e)
			set := affinitySetName(svc.name, p.protocol, p.port, e, svc.affinityTimeout)
			r.sets[set] = svc.affinityTimeout
			rules = append(rules, w.ip+" saddr @"+set+" goto "+epChain)
			targets[i] = "goto " + epChain
			r.chains[epChain] = []string{
				"update @" + set + " { " + w.ip + " saddr }",
				"meta l4proto " + proto + " dnat to " + e.String(),
			}
		}
		rules = append(rules, numgenRule("vmap", targets))
		r.chains[chain] = rules
	}
	return r
}

// dnatRule balances over endpoints straight from an anonymous map, without
// a chain per endpoint.
func dnatRule(w words, proto string, eps []endpoint) string {
	targets := make([]string, len(eps))
	for i, e := range eps {
		targets[i] = e.ip.String() + " . " + strconv.Itoa(int(e.port))
	}
	return "meta l4proto " + proto + " dnat " + w.ip + " addr . port to " + numgenRule("map", targets)
}

// numgenRule is "numgen random mod N <kind> { 0 : t0 , 1 : t1 , ... }".
func numgenRule(kind string, targets []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "numgen random mod %d %s { ", len(targets), kind)
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
