package main

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/miekg/dns"
)

// The query mix, and what the MCS DNS specification (sections cited by
// number) says each kind of query must get, computed from the dataset.

// expectation is what a conforming answer looks like: one of the rcodes,
// every required record, and no record that is neither required nor
// allowed. Records are in the form record() gives them.
type expectation struct {
	rcodes   []int
	required []string
	allowed  []string
	// unspecified: the spec does not define this name; any answer conforms.
	unspecified bool
}

// probe is one query and its expectation.
type probe struct {
	name  string
	qtype uint16
	want  expectation
}

// kind is one kind of query in the mix.
type kind struct {
	label  string
	weight int    // share of the mix, in queries per round
	rule   string // where the expectation comes from
	probes []probe
}

var (
	nxdomain = []int{dns.RcodeNameError}
	noerror  = []int{dns.RcodeSuccess}
	// noRecords: the name has no records; whether it exists is the
	// server's business.
	noRecords = []int{dns.RcodeSuccess, dns.RcodeNameError}
)

func svcName(namespace, name string) string { return name + "." + namespace + ".svc." + zone }

func hostName(h headlessService, ep endpoint) string {
	hn := ep.hostname
	if hn == "" {
		hn = strings.ReplaceAll(ep.addr.String(), ".", "-")
	}
	return hn + "." + ep.cluster + "." + svcName(h.namespace, h.name)
}

func addrRecord(a netip.Addr) string {
	if a.Is4() {
		return "A " + a.String()
	}
	return "AAAA " + a.String()
}

// srvRecord leaves out priority and weight: the spec does not prescribe
// them.
func srvRecord(port int32, target string) string { return fmt.Sprintf("SRV %d %s", port, target) }

func ptrRecord(target string) string { return "PTR " + target }

// record is the comparable form of an answer record: type and data, names
// in lower case, without owner, TTL, or SRV priority and weight.
func record(rr dns.RR) string {
	switch rr := rr.(type) {
	case *dns.A:
		return "A " + rr.A.String()
	case *dns.AAAA:
		return "AAAA " + rr.AAAA.String()
	case *dns.SRV:
		return srvRecord(int32(rr.Port), strings.ToLower(rr.Target))
	case *dns.PTR:
		return ptrRecord(strings.ToLower(rr.Ptr))
	case *dns.TXT:
		return "TXT " + strings.Join(rr.Txt, " ")
	}
	return strings.ToLower(strings.TrimPrefix(rr.String(), rr.Header().String()))
}

// buildMix returns the kinds of queries, each with every probe of its kind.
func buildMix(d *dataset) []kind {
	var (
		a, aaaa, aaaaNone, srvNamed, srvBare, csCluster, ptrVIP []probe
		hA, hHost, hDashed, hSRV, hCluster, ptrHost, nx         []probe
	)
	for _, s := range d.clusterSet {
		name := svcName(s.namespace, s.name)
		a = append(a, probe{name, dns.TypeA, expectation{rcodes: noerror, required: []string{addrRecord(s.v4)}}})
		if s.v6.IsValid() {
			aaaa = append(aaaa, probe{name, dns.TypeAAAA, expectation{rcodes: noerror, required: []string{addrRecord(s.v6)}}})
		} else {
			aaaaNone = append(aaaaNone, probe{name, dns.TypeAAAA, expectation{rcodes: noerror}})
		}
		p := s.ports[0]
		srvNamed = append(srvNamed, probe{"_" + p.name + "._" + strings.ToLower(string(p.proto)) + "." + name, dns.TypeSRV,
			expectation{rcodes: noerror, required: []string{srvRecord(p.number, name)}}})
		srvBare = append(srvBare, probe{name, dns.TypeSRV, expectation{unspecified: true}})
		csCluster = append(csCluster, probe{clusterA + "." + name, dns.TypeA, expectation{rcodes: noRecords}})
		rev, _ := dns.ReverseAddr(s.v4.String())
		ptrVIP = append(ptrVIP, probe{rev, dns.TypePTR, expectation{rcodes: noerror, required: []string{ptrRecord(name)}}})
		nx = append(nx, probe{svcName(s.namespace, "no-"+s.name), dns.TypeA, expectation{rcodes: nxdomain}})
	}
	for _, h := range d.headless {
		name := svcName(h.namespace, h.name)
		var addrs, srvs, unnamedSRVs []string
		for _, ep := range h.ready() {
			addrs = append(addrs, addrRecord(ep.addr))
			srv := srvRecord(h.ports[0].number, hostName(h, ep))
			if ep.hostname == "" {
				// 2.4.2 asks for an SRV record per endpoint with a
				// hostname; it is silent on the others.
				unnamedSRVs = append(unnamedSRVs, srv)
				hDashed = append(hDashed, probe{hostName(h, ep), dns.TypeA, expectation{unspecified: true}})
				continue
			}
			srvs = append(srvs, srv)
			hHost = append(hHost, probe{hostName(h, ep), dns.TypeA, expectation{rcodes: noerror, required: []string{addrRecord(ep.addr)}}})
			rev, _ := dns.ReverseAddr(ep.addr.String())
			ptrHost = append(ptrHost, probe{rev, dns.TypePTR, expectation{rcodes: noerror, required: []string{ptrRecord(hostName(h, ep))}}})
		}
		hA = append(hA, probe{name, dns.TypeA, expectation{rcodes: noerror, required: addrs}})
		p := h.ports[0]
		hSRV = append(hSRV, probe{"_" + p.name + "._" + strings.ToLower(string(p.proto)) + "." + name, dns.TypeSRV,
			expectation{rcodes: noerror, required: srvs, allowed: unnamedSRVs}})
		hCluster = append(hCluster, probe{clusterB + "." + name, dns.TypeA, expectation{rcodes: noRecords}})
	}
	empty := []probe{{svcName(d.empty.namespace, d.empty.name), dns.TypeA, expectation{rcodes: nxdomain}}}
	version := []probe{{"dns-version." + zone, dns.TypeTXT, expectation{rcodes: noerror, required: []string{`TXT 1.1.0`}}}}

	kinds := []kind{
		{"A ClusterSetIP", 30, "2.3.1", a},
		{"AAAA ClusterSetIP (dual stack)", 5, "2.3.1", aaaa},
		{"AAAA ClusterSetIP (IPv4 only)", 5, "2.3.1: no AAAA without an IPv6 ClusterSetIP (NODATA)", aaaaNone},
		{"SRV _port._proto ClusterSetIP", 10, "2.3.2", srvNamed},
		{"SRV bare name ClusterSetIP", 4, "not in the spec (a CoreDNS extension)", srvBare},
		{"A headless", 10, "2.4.1: every ready endpoint", hA},
		{"A <hostname>.<clusterid> headless", 10, "2.4.1", hHost},
		{"A <dashed-ip>.<clusterid> headless", 3, "not in the spec: endpoints without hostname", hDashed},
		{"SRV _port._proto headless", 3, "2.4.2: one per ready endpoint with a hostname", hSRV},
		{"NXDOMAIN unknown service", 8, "no such name (RFC 1034 4.3.2)", nx},
		{"A headless without ready endpoints", 2, "2.4.1: NXDOMAIN", empty},
		{"A <clusterid>.<svc> ClusterSetIP", 2, "2.3.4: must not exist", csCluster},
		{"A <clusterid>.<svc> headless", 2, "2.4.4: must not exist", hCluster},
		{"PTR ClusterSetIP", 4, "2.3.3", ptrVIP},
		{"PTR headless endpoint", 2, "2.4.3", ptrHost},
		{"TXT dns-version", 1, "2.2 (the spec's example version)", version},
	}
	return slices.DeleteFunc(kinds, func(k kind) bool { return len(k.probes) == 0 })
}

// sequence is the order the load generator asks the queries in: rounds of
// every kind by its weight, each kind going through its probes in turn.
func sequence(kinds []kind, rounds int) []probe {
	next := make([]int, len(kinds))
	var out []probe
	for range rounds {
		for i, k := range kinds {
			for range k.weight {
				out = append(out, k.probes[next[i]%len(k.probes)])
				next[i]++
			}
		}
	}
	return out
}

// conforms says whether an answer meets the expectation, and if not, why.
func (e expectation) conforms(rcode int, records []string) (bool, string) {
	if e.unspecified {
		return true, ""
	}
	if !slices.Contains(e.rcodes, rcode) {
		var want []string
		for _, rc := range e.rcodes {
			want = append(want, dns.RcodeToString[rc])
		}
		return false, fmt.Sprintf("rcode %s, want %s", dns.RcodeToString[rcode], strings.Join(want, " or "))
	}
	var missing, unexpected []string
	for _, r := range e.required {
		if !slices.Contains(records, r) {
			missing = append(missing, r)
		}
	}
	for _, r := range records {
		if !slices.Contains(e.required, r) && !slices.Contains(e.allowed, r) {
			unexpected = append(unexpected, r)
		}
	}
	var why []string
	if len(missing) > 0 {
		why = append(why, fmt.Sprintf("missing %d of %d required records (%s)", len(missing), len(e.required), abbreviate(missing)))
	}
	if len(unexpected) > 0 {
		why = append(why, fmt.Sprintf("%d records the spec does not call for (%s)", len(unexpected), abbreviate(unexpected)))
	}
	return len(why) == 0, strings.Join(why, "; ")
}

// abbreviate shows the first two strings and how many more there are.
func abbreviate(ss []string) string {
	if len(ss) <= 2 {
		return strings.Join(ss, ", ")
	}
	return fmt.Sprintf("%s, %s and %d more", ss[0], ss[1], len(ss)-2)
}
