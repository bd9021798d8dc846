package proxier

import (
	"fmt"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"
)

// iptablesJump is the rule in a built-in chain that jumps to one of the
// proxier's chains.
type iptablesJump struct {
	table, chain string
	args         []string
}

// iptablesJumps wire the built-in chains to the proxier's, one jump per
// built-in chain, so their order does not matter. As in nftables mode, the
// rejects sit in the filter hooks (REJECT is not allowed in the nat table),
// which run after DNAT: input, forward and output check the ports without
// endpoints; forward and output also reject any other port of a
// ClusterSetIP, which nothing DNATed. The filter checks only need a
// connection's first packet.
var iptablesJumps = func() []iptablesJump {
	newConn := []string{"-m", "conntrack", "--ctstate", "NEW"}
	jump := func(table, chain, comment, to string, match ...string) iptablesJump {
		args := append(append([]string{}, match...), "-m", "comment", "--comment", comment, "-j", to)
		return iptablesJump{table: table, chain: chain, args: args}
	}
	return []iptablesJump{
		jump(iptablesFilter, "INPUT", "mcsd ClusterSetIP ports without endpoints", iptServicesChain, newConn...),
		jump(iptablesFilter, "FORWARD", "mcsd ClusterSetIP rejects", iptFilterChain, newConn...),
		jump(iptablesFilter, "OUTPUT", "mcsd ClusterSetIP rejects", iptFilterChain, newConn...),
		jump(iptablesNAT, "PREROUTING", "mcsd ClusterSetIPs", iptServicesChain),
		jump(iptablesNAT, "OUTPUT", "mcsd ClusterSetIPs", iptServicesChain),
		jump(iptablesNAT, "POSTROUTING", "mcsd masquerading", iptPostroutingChain),
	}
}()

// iptablesStaticChains are the proxier's chains of each table that do not
// belong to one service, in the order they are declared.
var iptablesStaticChains = map[string][]string{
	iptablesNAT:    {iptServicesChain, iptMarkMasqChain, iptMasqOutsideChain, iptPostroutingChain},
	iptablesFilter: {iptServicesChain, iptFilterChain, iptRejectChain},
}

// iptablesOptions are the settings the rules depend on, besides the
// services.
type iptablesOptions struct {
	family v1.IPFamily
	// mark is the masquerade mark, as "0x...".
	mark          string
	masqueradeAll bool
	podCIDRs      []string
}

// hostMask is "/32" or "/128", to match one address.
func (o iptablesOptions) hostMask() string {
	if o.family == v1.IPv6Protocol {
		return "/128"
	}
	return "/32"
}

// iptablesStaticRules are the rules of the static chains of table that do
// not depend on the services (MCSD-SERVICES's are the services' own).
func iptablesStaticRules(o iptablesOptions, table string) map[string][]string {
	if table == iptablesFilter {
		return map[string][]string{
			// The ports without usable endpoints first: one of them may
			// be dropped rather than rejected.
			iptFilterChain: {"-j " + iptServicesChain},
			iptRejectChain: {
				"-p tcp -j REJECT --reject-with tcp-reset",
				"-j REJECT",
			},
		}
	}
	rules := map[string][]string{
		iptMarkMasqChain: {"-j MARK --or-mark " + o.mark},
		// kube-proxy's shape: leave unmarked packets alone, clear the bit
		// so that nothing further down takes it for a mark of its own,
		// masquerade with a random source port.
		iptPostroutingChain: {
			"-m mark ! --mark " + o.mark + "/" + o.mark + " -j RETURN",
			"-j MARK --xor-mark " + o.mark,
			`-m comment --comment "mcsd ClusterSetIP traffic requiring SNAT" -j MASQUERADE --random-fully`,
		},
	}
	if len(o.podCIDRs) > 0 {
		// One "! -s" cannot name several CIDRs: each pod CIDR returns, and
		// what is left is from outside the pod network.
		var outside []string
		for _, c := range o.podCIDRs {
			outside = append(outside, "-s "+c+" -j RETURN")
		}
		rules[iptMasqOutsideChain] = append(outside, "-j "+iptMarkMasqChain)
	}
	return rules
}

// iptablesService is what one ServiceImport puts in iptables; rules are
// the text that follows "-A CHAIN ".
type iptablesService struct {
	// natServices are its rules of nat MCSD-SERVICES, one per port with
	// endpoints, to its service-port chain.
	natServices []string
	// chains are its own nat chains (MCSD-SVC-..., MCSD-SEP-...) with
	// their rules.
	chains map[string][]string
	// filterServices are its rules of filter MCSD-SERVICES: a reject or a
	// drop per port without usable endpoints.
	filterServices []string
	// filterVIP is its rule of MCSD-FILTER, which rejects every other port.
	filterVIP string
	// dropped counts its ports dropped for want of local endpoints.
	dropped int
}

// renderIPTables computes a service's rules in kube-proxy iptables mode's
// shape: which endpoints a port uses is decided by the same policy as in
// nftables mode. It is a pure function of its inputs.
func renderIPTables(svc *serviceInfo, slices []*sliceInfo, pol trafficPolicy, o iptablesOptions) *renderedService {
	ipt := &iptablesService{chains: map[string][]string{}}
	r := &renderedService{vip: svc.vip, slots: map[portKey][]endpoint{}, rules: ipt}
	vip := svc.vip + o.hostMask()
	name := svc.name.String()
	for _, p := range svc.ports {
		c := pol.choose(svc, endpointsFor(p, slices))
		proto := strings.ToLower(string(p.protocol))
		port := strconv.Itoa(int(p.port))
		id := name + "/" + proto + "/" + port
		match := "-d " + vip + " -p " + proto + " -m " + proto + " --dport " + port
		pk := portKey{p.protocol, p.port}
		if len(c.endpoints) == 0 {
			r.slots[pk] = nil
			if c.dropped {
				ipt.dropped++
				ipt.filterServices = append(ipt.filterServices,
					match+` -m comment --comment "`+id+` has no local endpoints" -j DROP`)
			} else {
				ipt.filterServices = append(ipt.filterServices,
					match+` -m comment --comment "`+id+` has no endpoints" -j `+iptRejectChain)
			}
			continue
		}
		eps := c.endpoints
		if len(eps) > maxEndpoints {
			eps = eps[:maxEndpoints]
		}
		r.slots[pk] = eps
		r.endpoints += len(eps)
		svcChain := iptServiceChain(id)
		ipt.natServices = append(ipt.natServices, match+` -m comment --comment "`+id+`" -j `+svcChain)

		var rules []string
		switch {
		case o.masqueradeAll:
			rules = append(rules, "-j "+iptMarkMasqChain)
		case len(o.podCIDRs) > 0:
			rules = append(rules, "-j "+iptMasqOutsideChain)
		}
		// Each endpoint is reached through a target: its own chain
		// (MCSD-SEP-<hash>) when the DNAT needs a companion rule, else the
		// DNAT itself, in the rule that picks the endpoint. Only an
		// endpoint that can hairpin here needs a chain: the masquerade
		// mark and the DNAT must follow the same random draw. kube-proxy
		// gives every endpoint a chain; iptables-nft's restore time grows
		// with the square of the number of chains (22,000 chains take 3.5 s
		// to load, 44,000 take 12.7 s, on the bench machine), so at 10,000
		// imports of 10 endpoints a chain per endpoint would take minutes.
		seconds := strconv.FormatInt(int64(svc.affinityTimeout.Seconds()), 10)
		picks := make([]string, len(eps))   // what a statistic rule does
		returns := make([]string, len(eps)) // what an affinity rule does
		for i, e := range eps {
			// The recent list of an endpoint is named as its chain
			// would be, whether or not it has one.
			list := iptEndpointChain(id, e.String())
			dnat := "-p " + proto + " -m " + proto + " -j DNAT --to-destination " + e.String()
			remember := ""
			if svc.affinityTimeout > 0 {
				remember = "-m recent --name " + list + " --set "
			}
			if !pol.isLocal(e) {
				picks[i] = remember + dnat
				// --update, as --rcheck, matches a client seen within the
				// timeout, and renews it, as the chain's --set would.
				returns[i] = "-m recent --name " + list + " --update --seconds " + seconds + " --reap " + dnat
				continue
			}
			// Hairpin: an endpoint that reaches itself through the
			// ClusterSetIP must be masqueraded, or it answers itself.
			ipt.chains[list] = []string{
				"-s " + e.ip.String() + o.hostMask() + " -j " + iptMarkMasqChain,
				strings.TrimSpace(remember + dnat),
			}
			picks[i] = "-j " + list
			returns[i] = "-m recent --name " + list + " --rcheck --seconds " + seconds + " --reap -j " + list
		}
		if svc.affinityTimeout > 0 {
			// ClientIP affinity, as kube-proxy does it: the recent module
			// remembers, per endpoint, the clients sent there; a client
			// seen within the timeout goes back.
			rules = append(rules, returns...)
		}
		// Endpoint i of n is taken with probability 1/(n-i) among those
		// that reach its rule: every endpoint gets 1/n.
		for i, pick := range picks {
			if i < len(picks)-1 {
				pick = fmt.Sprintf("-m statistic --mode random --probability %0.10f %s", 1/float64(len(picks)-i), pick)
			}
			rules = append(rules, pick)
		}
		ipt.chains[svcChain] = rules
	}
	ipt.filterVIP = "-d " + vip + ` -m comment --comment "` + name + ` port not served" -j ` + iptRejectChain
	return r
}
