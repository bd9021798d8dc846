package dns

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/klog/v2/ktesting"
)

const localCluster = "c1"

// clustersetIndex is the data of the table tests: services of every kind in
// the namespace prod, from the clusters c1 (local) and c2.
func clustersetIndex(t testing.TB) *Index {
	idx := NewIndex(ktesting.NewLogger(t, ktesting.NewConfig()))
	tcp, udp := corev1.ProtocolTCP, corev1.ProtocolUDP

	// ClusterSetIP, dual stack, two named ports.
	idx.setImport(clusterSetImport("prod", "web", []string{"243.0.0.10", "fd00:243::10"},
		port("http", tcp, 80), port("https", tcp, 443)))
	// The conformance suite's service: tcp/42 and udp/42.
	idx.setImport(clusterSetImport("prod", "hello", []string{"243.0.0.11"},
		port("tcp", tcp, 42), port("udp", udp, 42)))
	// One unnamed port, IPv4 only.
	idx.setImport(clusterSetImport("prod", "single", []string{"243.0.0.12"}, port("", tcp, 8080)))
	// IPv6 only.
	idx.setImport(clusterSetImport("prod", "v6only", []string{"fd00:243::20"}, port("http", tcp, 80)))
	// ClusterSetIP without ClusterSetIPs (VIPs turned off): endpoint
	// addresses, the local cluster's first. c2's slice sorts first by name.
	idx.setImport(clusterSetImport("prod", "novip", nil, port("http", tcp, 80)))
	idx.setSlice(mcsSlice("prod", "novip-a", "novip", "c2", endpoint("", "10.2.0.7")))
	idx.setSlice(mcsSlice("prod", "novip-b", "novip", "c1", endpoint("", "10.1.0.7")))
	// The same, without any endpoint.
	idx.setImport(clusterSetImport("prod", "novip-down", nil, port("http", tcp, 80)))

	// Headless, from two clusters, dual stack in c2.
	idx.setImport(headlessImport("prod", "db", port("pg", tcp, 5432)))
	idx.setSlice(mcsSlice("prod", "db-c1", "db", "c1",
		endpoint("db-0", "10.1.0.1"),
		endpoint("db-1", "10.1.0.2"),
		endpoint("", "10.1.0.3"),
		notReady(endpoint("db-9", "10.1.0.9"))))
	idx.setSlice(mcsSlice("prod", "db-c2", "db", "c2", endpoint("db-0", "10.2.0.1")))
	idx.setSlice(mcsSlice("prod", "db-c2-v6", "db", "c2",
		endpoint("db-0", "fd00:10:2::1"),
		endpoint("", "fd00:10:2::5")))
	// Headless, sharing db-0.c1's pod; its other endpoints have no hostname
	// and an IPv6 address ending in "::", or come from a cluster whose ID
	// is not a DNS label.
	idx.setImport(headlessImport("prod", "db-alias", port("pg", tcp, 5432)))
	idx.setSlice(mcsSlice("prod", "db-alias-c1", "db-alias", "c1", endpoint("db-0", "10.1.0.1")))
	idx.setSlice(mcsSlice("prod", "db-alias-c1-v6", "db-alias", "c1", endpoint("", "fd00:10:3::")))
	idx.setSlice(mcsSlice("prod", "db-alias-odd", "db-alias", "c3.odd", endpoint("x-0", "10.3.0.1")))
	// Headless whose only endpoint is not ready.
	idx.setImport(headlessImport("prod", "empty", port("pg", tcp, 5432)))
	idx.setSlice(mcsSlice("prod", "empty-c1", "empty", "c1", notReady(endpoint("e-0", "10.1.0.50"))))
	// A slice whose ServiceImport does not exist (yet).
	idx.setSlice(mcsSlice("prod", "orphan-c1", "orphan", "c1", endpoint("o-0", "10.1.0.60")))
	// A namespace whose only service is a headless one without ready
	// endpoints.
	idx.setImport(headlessImport("dark", "empty", port("pg", tcp, 5432)))

	idx.markSynced()
	return idx
}

// A row of the table: one question and the answer it must get.
type row struct {
	name   string
	q      string // relative to clusterset.local unless it ends in a dot
	qtype  uint16
	qclass uint16 // ClassINET when 0
	rcode  int
	answer []string // records in zone file format, any order
	extra  []string // the additional section, any order (not checked when nil)
	// authority is the owner of the SOA a negative answer carries
	// (clusterset.local. when empty).
	authority string
}

func (r row) qname() string {
	if strings.HasSuffix(r.q, ".") {
		return r.q
	}
	if r.q == "" {
		return "clusterset.local."
	}
	return r.q + ".clusterset.local."
}

func TestServeRecords(t *testing.T) {
	cfg := Config{
		LocalCluster: localCluster,
		NSAddresses:  addrs("10.0.0.53", "fd00::53"),
	}

	const (
		ptrWeb    = "0.1.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.3.4.2.0.0.0.d.f.ip6.arpa."
		webAddrs4 = "web.prod.svc 5 IN A 243.0.0.10"
		webAddrs6 = "web.prod.svc 5 IN AAAA fd00:243::10"
	)
	// miekg/dns's own reverse names, to check ours against.
	ptrDBv6, _ := dns.ReverseAddr("fd00:10:2::5")
	ptrDB0c2, _ := dns.ReverseAddr("fd00:10:2::1")
	ptrAlias6, _ := dns.ReverseAddr("fd00:10:3::")
	dbHosts := []string{
		"db-0.c1.db.prod.svc 5 IN A 10.1.0.1",
		"db-1.c1.db.prod.svc 5 IN A 10.1.0.2",
		"10-1-0-3.c1.db.prod.svc 5 IN A 10.1.0.3",
		"db-0.c2.db.prod.svc 5 IN A 10.2.0.1",
		"db-0.c2.db.prod.svc 5 IN AAAA fd00:10:2::1",
		"fd00-10-2--5.c2.db.prod.svc 5 IN AAAA fd00:10:2::5",
	}
	dbSRV := func(owner string) []string {
		var out []string
		for _, target := range []string{"db-0.c1", "db-1.c1", "10-1-0-3.c1", "db-0.c2", "fd00-10-2--5.c2"} {
			out = append(out, fmt.Sprintf("%s 5 IN SRV 0 20 5432 %s.db.prod.svc", owner, target))
		}
		return out
	}

	rows := []row{
		// The zone itself.
		{name: "schema version", q: "dns-version", qtype: dns.TypeTXT, answer: []string{`dns-version 5 IN TXT "1.1.0"`}},
		{name: "schema version has no address", q: "dns-version", qtype: dns.TypeA},
		{name: "nothing below the schema version", q: "x.dns-version", qtype: dns.TypeTXT, rcode: dns.RcodeNameError},
		{name: "SOA at the apex", q: "", qtype: dns.TypeSOA,
			answer: []string{"@ 5 IN SOA ns.dns.clusterset.local. hostmaster.clusterset.local. 0 7200 1800 86400 5"}},
		{name: "NS at the apex, with glue", q: "", qtype: dns.TypeNS,
			answer: []string{"@ 5 IN NS ns.dns.clusterset.local."},
			extra:  []string{"ns.dns 5 IN A 10.0.0.53", "ns.dns 5 IN AAAA fd00::53"}},
		{name: "the apex has no address", q: "", qtype: dns.TypeA},
		{name: "the name server's address", q: "ns.dns", qtype: dns.TypeA, answer: []string{"ns.dns 5 IN A 10.0.0.53"}},
		{name: "the name above the name server exists without records", q: "dns", qtype: dns.TypeA},
		{name: "unknown name under the apex", q: "nope", qtype: dns.TypeA, rcode: dns.RcodeNameError},
		{name: "svc exists without records", q: "svc", qtype: dns.TypeA},
		{name: "a namespace with services exists without records", q: "prod.svc", qtype: dns.TypeA},
		{name: "a namespace without services does not exist", q: "nothere.svc", qtype: dns.TypeA, rcode: dns.RcodeNameError},
		{name: "a namespace whose only service has no ready endpoints does not exist", q: "dark.svc", qtype: dns.TypeA, rcode: dns.RcodeNameError},
		{name: "a name not under svc", q: "web.prod.pod", qtype: dns.TypeA, rcode: dns.RcodeNameError},
		{name: "a name too deep", q: "a.b.c.d.web.prod.svc", qtype: dns.TypeA, rcode: dns.RcodeNameError},

		// ClusterSetIP.
		{name: "ClusterSetIP A", q: "web.prod.svc", qtype: dns.TypeA, answer: []string{webAddrs4}},
		{name: "ClusterSetIP AAAA", q: "web.prod.svc", qtype: dns.TypeAAAA, answer: []string{webAddrs6}},
		{name: "ClusterSetIP ANY gives both families", q: "web.prod.svc", qtype: dns.TypeANY, answer: []string{webAddrs4, webAddrs6}},
		{name: "names are case-insensitive and answered as asked", q: "WEB.Prod.svc", qtype: dns.TypeA,
			answer: []string{"WEB.Prod.svc 5 IN A 243.0.0.10"}},
		{name: "ClusterSetIP has no TXT", q: "web.prod.svc", qtype: dns.TypeTXT},
		{name: "IPv4-only service: AAAA is NODATA", q: "single.prod.svc", qtype: dns.TypeAAAA},
		{name: "IPv6-only service: A is NODATA", q: "v6only.prod.svc", qtype: dns.TypeA},
		{name: "IPv6-only service AAAA", q: "v6only.prod.svc", qtype: dns.TypeAAAA, answer: []string{"v6only.prod.svc 5 IN AAAA fd00:243::20"}},
		{name: "unknown service", q: "nope.prod.svc", qtype: dns.TypeA, rcode: dns.RcodeNameError},
		{name: "service in another namespace", q: "web.staging.svc", qtype: dns.TypeA, rcode: dns.RcodeNameError},
		{name: "named port SRV with the target's addresses", q: "_http._tcp.web.prod.svc", qtype: dns.TypeSRV,
			answer: []string{"_http._tcp.web.prod.svc 5 IN SRV 0 100 80 web.prod.svc"},
			extra:  []string{webAddrs4, webAddrs6}},
		{name: "named port with the wrong protocol", q: "_http._udp.web.prod.svc", qtype: dns.TypeSRV, rcode: dns.RcodeNameError},
		{name: "unknown port name", q: "_ftp._tcp.web.prod.svc", qtype: dns.TypeSRV, rcode: dns.RcodeNameError},
		{name: "named port SRV name has no address", q: "_http._tcp.web.prod.svc", qtype: dns.TypeA},
		{name: "protocol name above SRV names exists without records", q: "_tcp.web.prod.svc", qtype: dns.TypeSRV},
		{name: "protocol without named ports does not exist", q: "_sctp.web.prod.svc", qtype: dns.TypeSRV, rcode: dns.RcodeNameError},
		{name: "unnamed port has no SRV name", q: "_._tcp.single.prod.svc", qtype: dns.TypeSRV, rcode: dns.RcodeNameError},
		{name: "bare-name SRV: every port", q: "web.prod.svc", qtype: dns.TypeSRV,
			answer: []string{"web.prod.svc 5 IN SRV 0 50 80 web.prod.svc", "web.prod.svc 5 IN SRV 0 50 443 web.prod.svc"},
			extra:  []string{webAddrs4, webAddrs6}},
		{name: "bare-name SRV: tcp/42 and udp/42 collapse into one", q: "hello.prod.svc", qtype: dns.TypeSRV,
			answer: []string{"hello.prod.svc 5 IN SRV 0 100 42 hello.prod.svc"},
			extra:  []string{"hello.prod.svc 5 IN A 243.0.0.11"}},
		{name: "bare-name SRV includes an unnamed port", q: "single.prod.svc", qtype: dns.TypeSRV,
			answer: []string{"single.prod.svc 5 IN SRV 0 100 8080 single.prod.svc"}},
		{name: "ClusterSetIP has no <clusterid>.<svc> name", q: "c1.web.prod.svc", qtype: dns.TypeA, rcode: dns.RcodeNameError},
		{name: "ClusterSetIP has no hostnames", q: "x.c1.web.prod.svc", qtype: dns.TypeA, rcode: dns.RcodeNameError},
		{name: "without ClusterSetIPs: ready endpoint addresses, local cluster first", q: "novip.prod.svc", qtype: dns.TypeA,
			answer: []string{"novip.prod.svc 5 IN A 10.1.0.7", "novip.prod.svc 5 IN A 10.2.0.7"}},
		{name: "without ClusterSetIPs nor endpoints: NODATA", q: "novip-down.prod.svc", qtype: dns.TypeA},
		{name: "a slice without its ServiceImport answers nothing", q: "orphan.prod.svc", qtype: dns.TypeA, rcode: dns.RcodeNameError},

		// Headless.
		{name: "headless A: every ready IPv4 endpoint", q: "db.prod.svc", qtype: dns.TypeA, answer: []string{
			"db.prod.svc 5 IN A 10.1.0.1", "db.prod.svc 5 IN A 10.1.0.2", "db.prod.svc 5 IN A 10.1.0.3", "db.prod.svc 5 IN A 10.2.0.1"}},
		{name: "headless AAAA: every ready IPv6 endpoint", q: "db.prod.svc", qtype: dns.TypeAAAA, answer: []string{
			"db.prod.svc 5 IN AAAA fd00:10:2::1", "db.prod.svc 5 IN AAAA fd00:10:2::5"}},
		{name: "headless hostname A", q: "db-0.c1.db.prod.svc", qtype: dns.TypeA, answer: []string{"db-0.c1.db.prod.svc 5 IN A 10.1.0.1"}},
		{name: "the same hostname in another cluster", q: "db-0.c2.db.prod.svc", qtype: dns.TypeA, answer: []string{"db-0.c2.db.prod.svc 5 IN A 10.2.0.1"}},
		{name: "a dual-stack hostname's AAAA", q: "db-0.c2.db.prod.svc", qtype: dns.TypeAAAA, answer: []string{"db-0.c2.db.prod.svc 5 IN AAAA fd00:10:2::1"}},
		{name: "an IPv4-only hostname's AAAA is NODATA", q: "db-0.c1.db.prod.svc", qtype: dns.TypeAAAA},
		{name: "hostname falls back to the dashed IPv4 address", q: "10-1-0-3.c1.db.prod.svc", qtype: dns.TypeA,
			answer: []string{"10-1-0-3.c1.db.prod.svc 5 IN A 10.1.0.3"}},
		{name: "hostname falls back to the dashed IPv6 address", q: "fd00-10-2--5.c2.db.prod.svc", qtype: dns.TypeAAAA,
			answer: []string{"fd00-10-2--5.c2.db.prod.svc 5 IN AAAA fd00:10:2::5"}},
		{name: "a not ready endpoint has no name", q: "db-9.c1.db.prod.svc", qtype: dns.TypeA, rcode: dns.RcodeNameError},
		{name: "a hostname in the wrong cluster", q: "db-1.c2.db.prod.svc", qtype: dns.TypeA, rcode: dns.RcodeNameError},
		{name: "no <clusterid>.<svc> records: the name is only above the hostnames", q: "c1.db.prod.svc", qtype: dns.TypeA},
		{name: "no <clusterid>.<svc> records for AAAA either", q: "c2.db.prod.svc", qtype: dns.TypeAAAA},
		{name: "no <clusterid>.<svc> name for a cluster without endpoints", q: "c3.db.prod.svc", qtype: dns.TypeA, rcode: dns.RcodeNameError},
		{name: "headless named port SRV: one per ready endpoint", q: "_pg._tcp.db.prod.svc", qtype: dns.TypeSRV,
			answer: dbSRV("_pg._tcp.db.prod.svc"), extra: dbHosts},
		{name: "headless bare-name SRV", q: "db.prod.svc", qtype: dns.TypeSRV, answer: dbSRV("db.prod.svc"), extra: dbHosts},
		{name: "a port label and a hostname label do not mix", q: "_pg.c1.db.prod.svc", qtype: dns.TypeA, rcode: dns.RcodeNameError},
		{name: "hostname falls back to a dashed IPv6 address that does not end in a dash", q: "fd00-10-3--0.c1.db-alias.prod.svc", qtype: dns.TypeAAAA,
			answer: []string{"fd00-10-3--0.c1.db-alias.prod.svc 5 IN AAAA fd00:10:3::"}},
		{name: "endpoints of a cluster whose ID is not a label are in the service's answer", q: "db-alias.prod.svc", qtype: dns.TypeA,
			answer: []string{"db-alias.prod.svc 5 IN A 10.1.0.1", "db-alias.prod.svc 5 IN A 10.3.0.1"}},
		{name: "endpoints of a cluster whose ID is not a label have no names to point SRV records at", q: "_pg._tcp.db-alias.prod.svc", qtype: dns.TypeSRV,
			answer: []string{
				"_pg._tcp.db-alias.prod.svc 5 IN SRV 0 50 5432 db-0.c1.db-alias.prod.svc",
				"_pg._tcp.db-alias.prod.svc 5 IN SRV 0 50 5432 fd00-10-3--0.c1.db-alias.prod.svc"},
			extra: []string{"db-0.c1.db-alias.prod.svc 5 IN A 10.1.0.1", "fd00-10-3--0.c1.db-alias.prod.svc 5 IN AAAA fd00:10:3::"}},
		{name: "headless without ready endpoints: NXDOMAIN", q: "empty.prod.svc", qtype: dns.TypeA, rcode: dns.RcodeNameError},
		{name: "headless without ready endpoints: no SRV either", q: "_pg._tcp.empty.prod.svc", qtype: dns.TypeSRV, rcode: dns.RcodeNameError},

		// Reverse names.
		{name: "PTR of an IPv4 ClusterSetIP", q: "10.0.0.243.in-addr.arpa.", qtype: dns.TypePTR,
			answer: []string{"10.0.0.243.in-addr.arpa. 5 IN PTR web.prod.svc"}},
		{name: "PTR of an IPv6 ClusterSetIP", q: ptrWeb, qtype: dns.TypePTR,
			answer: []string{ptrWeb + " 5 IN PTR web.prod.svc"}},
		{name: "PTR of a headless endpoint", q: "1.0.1.10.in-addr.arpa.", qtype: dns.TypePTR,
			answer: []string{"1.0.1.10.in-addr.arpa. 5 IN PTR db-0.c1.db.prod.svc"}},
		{name: "PTR of a headless endpoint without hostname", q: "3.0.1.10.in-addr.arpa.", qtype: dns.TypePTR,
			answer: []string{"3.0.1.10.in-addr.arpa. 5 IN PTR 10-1-0-3.c1.db.prod.svc"}},
		{name: "PTR of an IPv6 headless endpoint", q: ptrDBv6, qtype: dns.TypePTR,
			answer: []string{ptrDBv6 + " 5 IN PTR fd00-10-2--5.c2.db.prod.svc"}},
		{name: "PTR of a dual-stack hostname's IPv6 address", q: ptrDB0c2, qtype: dns.TypePTR,
			answer: []string{ptrDB0c2 + " 5 IN PTR db-0.c2.db.prod.svc"}},
		{name: "an address two headless services share has one PTR, the first service's", q: "1.0.1.10.in-addr.arpa.", qtype: dns.TypePTR,
			answer: []string{"1.0.1.10.in-addr.arpa. 5 IN PTR db-0.c1.db.prod.svc"}},
		{name: "PTR of an endpoint whose dashed IPv6 name ends in 0", q: ptrAlias6, qtype: dns.TypePTR,
			answer: []string{ptrAlias6 + " 5 IN PTR fd00-10-3--0.c1.db-alias.prod.svc"}},
		{name: "an endpoint without a name has no PTR", q: "1.0.3.10.in-addr.arpa.", qtype: dns.TypePTR, rcode: dns.RcodeRefused},
		{name: "reverse name is case-insensitive", q: "10.0.0.243.IN-ADDR.ARPA.", qtype: dns.TypePTR,
			answer: []string{"10.0.0.243.IN-ADDR.ARPA. 5 IN PTR web.prod.svc"}},
		{name: "a served address has no other records", q: "10.0.0.243.in-addr.arpa.", qtype: dns.TypeA,
			authority: "10.0.0.243.in-addr.arpa."},
		{name: "a not ready endpoint has no PTR", q: "9.0.1.10.in-addr.arpa.", qtype: dns.TypePTR, rcode: dns.RcodeRefused},
		{name: "an address served by no one is not ours", q: "99.99.99.99.in-addr.arpa.", qtype: dns.TypePTR, rcode: dns.RcodeRefused},
		{name: "partial reverse names are not ours", q: "0.243.in-addr.arpa.", qtype: dns.TypePTR, rcode: dns.RcodeRefused},
		{name: "octets with leading zeros are not reverse names", q: "010.0.0.243.in-addr.arpa.", qtype: dns.TypePTR, rcode: dns.RcodeRefused},

		// Not ours.
		{name: "another zone", q: "example.com.", qtype: dns.TypeA, rcode: dns.RcodeRefused},
		{name: "the cluster-local zone", q: "web.prod.svc.cluster.local.", qtype: dns.TypeA, rcode: dns.RcodeRefused},
		{name: "a zone that merely ends like ours", q: "xclusterset.local.", qtype: dns.TypeA, rcode: dns.RcodeRefused},
		{name: "another class", q: "dns-version", qtype: dns.TypeTXT, qclass: dns.ClassCHAOS, rcode: dns.RcodeRefused},
		{name: "zone transfer", q: "", qtype: dns.TypeAXFR, rcode: dns.RcodeRefused},
	}

	eachLoopback(t, func(t *testing.T, host string) {
		ts := startServerOn(t, clustersetIndex(t), cfg, host)
		for _, network := range []string{"udp", "tcp"} {
			t.Run(network, func(t *testing.T) {
				for _, r := range rows {
					t.Run(r.name, func(t *testing.T) {
						t.Parallel()
						m := query(r.qname(), r.qtype)
						if r.qclass != 0 {
							m.Question[0].Qclass = r.qclass
						}
						resp := ts.exchange(t, network, m)
						checkAnswer(t, r, resp)
					})
				}
			})
		}
	})
}

// checkAnswer checks resp against the row: rcode, answer and additional
// records, and the SOA that negative answers carry.
func checkAnswer(t *testing.T, r row, resp *dns.Msg) {
	t.Helper()
	for _, p := range answerProblems(t, r, resp) {
		t.Error(p)
	}
}

// answerProblems says how resp differs from the answer the row wants; none
// when it is that answer.
func answerProblems(t testing.TB, r row, resp *dns.Msg) []string {
	t.Helper()
	if resp.Rcode != r.rcode {
		return []string{fmt.Sprintf("rcode = %s, want %s\n%v", rcodeName(resp.Rcode), rcodeName(r.rcode), resp)}
	}
	var out []string
	if len(resp.Question) != 1 || resp.Question[0].Name != r.qname() {
		out = append(out, fmt.Sprintf("question not echoed: %v", resp.Question))
	}
	if resp.Truncated {
		out = append(out, "truncated answer")
	}
	if got, want := rrStrings(resp.Answer, false), rrStrings(mustRRs(t, r.answer...), false); !slices.Equal(got, want) {
		out = append(out, fmt.Sprintf("answer:\n got %q\nwant %q", got, want))
	}
	if r.extra != nil {
		if got, want := rrStrings(resp.Extra, false), rrStrings(mustRRs(t, r.extra...), false); !slices.Equal(got, want) {
			out = append(out, fmt.Sprintf("additional:\n got %q\nwant %q", got, want))
		}
	}
	switch {
	case r.rcode == dns.RcodeRefused:
		if resp.Authoritative || len(resp.Ns) != 0 || len(resp.Answer) != 0 {
			out = append(out, fmt.Sprintf("REFUSED answer is authoritative or has records: %v", resp))
		}
	case r.rcode == dns.RcodeNameError || len(r.answer) == 0:
		// NXDOMAIN and NODATA carry the zone's SOA for negative caching.
		owner := r.authority
		if owner == "" {
			owner = "clusterset.local."
		}
		if len(resp.Ns) != 1 || resp.Ns[0].Header().Rrtype != dns.TypeSOA || resp.Ns[0].Header().Name != owner {
			out = append(out, fmt.Sprintf("negative answer without the SOA of %s in authority: %v", owner, resp.Ns))
		}
		if !resp.Authoritative {
			out = append(out, "negative answer is not authoritative")
		}
	default:
		if !resp.Authoritative || len(resp.Ns) != 0 {
			out = append(out, fmt.Sprintf("positive answer: authoritative=%v authority=%v", resp.Authoritative, resp.Ns))
		}
	}
	return out
}

// checkNames checks that name(in) is want for each (in, want) of cases.
func checkNames(t *testing.T, fn string, name func(string) string, cases map[string]string) {
	t.Helper()
	for in, want := range cases {
		if got := name(in); got != want {
			t.Errorf("%s(%s) = %q, want %q", fn, in, got, want)
		}
	}
}

func TestDashedAddr(t *testing.T) {
	checkNames(t, "dashedAddr", func(s string) string { return dashedAddr(netip.MustParseAddr(s)) }, map[string]string{
		"10.1.2.3":    "10-1-2-3",
		"2001:db8::1": "2001-db8--1",
		"fd00::":      "fd00--0",
		"::1":         "0--1",
		"::":          "0--0",
	})
}

func TestServeBigHeadlessTruncatesOverUDPAndAnswersOverTCP(t *testing.T) {
	eachLoopback(t, func(t *testing.T, host string) {
		idx := NewIndex(ktesting.NewLogger(t, ktesting.NewConfig()))
		idx.setImport(headlessImport("prod", "big", port("http", corev1.ProtocolTCP, 80)))
		var eps []discoveryv1.Endpoint
		for i := range 200 {
			eps = append(eps, endpoint("", fmt.Sprintf("10.9.%d.%d", i/250, i%250+1)))
		}
		idx.setSlice(mcsSlice("prod", "big-c1", "big", "c1", eps...))
		idx.markSynced()
		ts := startServerOn(t, idx, Config{}, host)

		t.Run("UDP without EDNS0 fits 512 bytes and is truncated", func(t *testing.T) {
			resp := ts.exchange(t, "udp", query("big.prod.svc.clusterset.local.", dns.TypeA))
			if !resp.Truncated {
				t.Fatalf("TC not set on a %d-record answer", len(resp.Answer))
			}
			resp.Compress = true // as the server packed it
			if n := resp.Len(); n > dns.MinMsgSize {
				t.Errorf("UDP answer is %d bytes, over 512", n)
			}
		})
		t.Run("UDP with a 4096-byte EDNS0 buffer is capped at the server's 1232 bytes and truncated", func(t *testing.T) {
			m := query("big.prod.svc.clusterset.local.", dns.TypeA)
			m.SetEdns0(4096, false)
			resp := ts.exchange(t, "udp", m)
			if !resp.Truncated {
				t.Fatalf("TC not set on a %d-record answer", len(resp.Answer))
			}
			resp.Compress = true // as the server packed it
			if n := resp.Len(); n > DefaultMaxUDPSize || n <= dns.MinMsgSize {
				t.Errorf("UDP answer is %d bytes, want 513..%d", n, DefaultMaxUDPSize)
			}
			if resp.IsEdns0() == nil {
				t.Errorf("truncated answer lost its OPT record")
			}
		})
		t.Run("TCP gets every record", func(t *testing.T) {
			resp := ts.exchange(t, "tcp", query("big.prod.svc.clusterset.local.", dns.TypeA))
			if resp.Truncated || len(resp.Answer) != 200 {
				t.Fatalf("TCP answer: truncated=%v with %d records, want 200", resp.Truncated, len(resp.Answer))
			}
		})
		t.Run("a bare-name SRV over UDP keeps what fits and sets TC", func(t *testing.T) {
			m := query("big.prod.svc.clusterset.local.", dns.TypeSRV)
			m.SetEdns0(1232, false)
			resp := ts.exchange(t, "udp", m)
			if !resp.Truncated || len(resp.Answer) == 0 {
				t.Fatalf("truncated=%v with %d SRV records", resp.Truncated, len(resp.Answer))
			}
		})
	})
}

func TestServeEDNS0(t *testing.T) {
	eachLoopback(t, func(t *testing.T, host string) {
		ts := startServerOn(t, clustersetIndex(t), Config{}, host)
		for _, network := range []string{"udp", "tcp"} {
			t.Run(network, func(t *testing.T) {
				t.Run("OPT is echoed with the server's buffer size and the DO bit", func(t *testing.T) {
					m := query("web.prod.svc.clusterset.local.", dns.TypeA)
					m.SetEdns0(4096, true)
					resp := ts.exchange(t, network, m)
					opt := resp.IsEdns0()
					if opt == nil {
						t.Fatalf("no OPT in the answer to an EDNS0 query: %v", resp)
					}
					if opt.UDPSize() != DefaultMaxUDPSize || !opt.Do() || opt.Version() != 0 {
						t.Errorf("OPT = size %d, do %v, version %d; want %d, true, 0", opt.UDPSize(), opt.Do(), opt.Version(), DefaultMaxUDPSize)
					}
					if resp.Rcode != dns.RcodeSuccess || len(resp.Answer) != 1 {
						t.Errorf("answer = %v", resp)
					}
				})
				t.Run("no OPT without EDNS0", func(t *testing.T) {
					resp := ts.exchange(t, network, query("web.prod.svc.clusterset.local.", dns.TypeA))
					if resp.IsEdns0() != nil {
						t.Errorf("OPT in the answer to a query without EDNS0")
					}
				})
				t.Run("an unknown EDNS version gets BADVERS", func(t *testing.T) {
					m := query("web.prod.svc.clusterset.local.", dns.TypeA)
					m.SetEdns0(4096, false)
					m.IsEdns0().SetVersion(1)
					resp := ts.exchange(t, network, m)
					if resp.Rcode != dns.RcodeBadVers || resp.IsEdns0() == nil || len(resp.Answer) != 0 {
						t.Errorf("rcode %s, OPT %v, answer %v; want BADVERS with OPT and no answer", rcodeName(resp.Rcode), resp.IsEdns0(), resp.Answer)
					}
				})
			})
		}
	})
}

// rawUDP sends b and returns the answer.
func rawUDP(t *testing.T, addr string, b []byte) *dns.Msg {
	t.Helper()
	c, err := net.Dial("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write(b); err != nil {
		t.Fatal(err)
	}
	// Only guards against a hung test.
	_ = c.SetReadDeadline(time.Now().Add(time.Minute))
	buf := make([]byte, dns.MaxMsgSize)
	n, err := c.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	resp := new(dns.Msg)
	if err := resp.Unpack(buf[:n]); err != nil {
		t.Fatalf("unparsable answer %x: %v", buf[:n], err)
	}
	return resp
}

func TestServeMalformedQueries(t *testing.T) {
	eachLoopback(t, func(t *testing.T, host string) {
		reg := prometheus.NewRegistry()
		ts := startServerOn(t, clustersetIndex(t), Config{Registerer: reg}, host)

		t.Run("garbage after a header gets FORMERR", func(t *testing.T) {
			// ID 0xbeef, a query with one question, then bytes that are no
			// question.
			b := []byte{0xbe, 0xef, 0x01, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xff, 0xfe, 0xfd}
			resp := rawUDP(t, ts.udp, b)
			if resp.Id != 0xbeef || resp.Rcode != dns.RcodeFormatError || !resp.Response {
				t.Errorf("answer = id %x rcode %s, want id beef FORMERR", resp.Id, rcodeName(resp.Rcode))
			}
			if got := testutil.ToFloat64(ts.metrics.malformed); got < 1 {
				t.Errorf("malformed queries counted %v, want at least 1", got)
			}
		})
		t.Run("two questions get FORMERR", func(t *testing.T) {
			m := query("web.prod.svc.clusterset.local.", dns.TypeA)
			m.Question = append(m.Question, m.Question[0])
			b, err := m.Pack()
			if err != nil {
				t.Fatal(err)
			}
			if resp := rawUDP(t, ts.udp, b); resp.Rcode != dns.RcodeFormatError {
				t.Errorf("rcode = %s, want FORMERR", rcodeName(resp.Rcode))
			}
		})
		t.Run("a question of type OPT gets FORMERR", func(t *testing.T) {
			resp := ts.exchange(t, "udp", query("web.prod.svc.clusterset.local.", dns.TypeOPT))
			if resp.Rcode != dns.RcodeFormatError {
				t.Errorf("rcode = %s, want FORMERR", rcodeName(resp.Rcode))
			}
		})
		t.Run("NOTIFY is not implemented", func(t *testing.T) {
			m := query("clusterset.local.", dns.TypeSOA)
			m.Opcode = dns.OpcodeNotify
			resp := ts.exchange(t, "udp", m)
			if resp.Rcode != dns.RcodeNotImplemented {
				t.Errorf("rcode = %s, want NOTIMP", rcodeName(resp.Rcode))
			}
		})
		t.Run("the server still answers", func(t *testing.T) {
			resp := ts.exchange(t, "udp", query("web.prod.svc.clusterset.local.", dns.TypeA))
			if resp.Rcode != dns.RcodeSuccess || len(resp.Answer) != 1 {
				t.Errorf("answer = %v", resp)
			}
		})
	})
}

func TestServeFailsUntilSynced(t *testing.T) {
	eachLoopback(t, func(t *testing.T, host string) {
		idx := NewIndex(ktesting.NewLogger(t, ktesting.NewConfig()))
		idx.setImport(clusterSetImport("prod", "web", []string{"243.0.0.10"}, port("http", corev1.ProtocolTCP, 80)))
		ts := startServerOn(t, idx, Config{}, host)

		for _, q := range []*dns.Msg{
			query("web.prod.svc.clusterset.local.", dns.TypeA),
			query("dns-version.clusterset.local.", dns.TypeTXT),
			query("10.0.0.243.in-addr.arpa.", dns.TypePTR),
		} {
			if resp := ts.exchange(t, "udp", q); resp.Rcode != dns.RcodeServerFailure {
				t.Errorf("before sync, %v: rcode = %s, want SERVFAIL", q.Question[0], rcodeName(resp.Rcode))
			}
		}
		if resp := ts.exchange(t, "udp", query("example.com.", dns.TypeA)); resp.Rcode != dns.RcodeRefused {
			t.Errorf("before sync, another zone: rcode = %s, want REFUSED", rcodeName(resp.Rcode))
		}
		if ts.Ready() {
			t.Errorf("Ready() before the index synced")
		}

		idx.markSynced()
		if !ts.Ready() {
			t.Errorf("not Ready() once synced and serving")
		}
		resp := ts.exchange(t, "udp", query("web.prod.svc.clusterset.local.", dns.TypeA))
		if resp.Rcode != dns.RcodeSuccess || len(resp.Answer) != 1 {
			t.Errorf("after sync: %v", resp)
		}
	})
}

func TestServeRotatesHeadlessAnswers(t *testing.T) {
	idx := NewIndex(ktesting.NewLogger(t, ktesting.NewConfig()))
	idx.setImport(headlessImport("prod", "db", port("pg", corev1.ProtocolTCP, 5432)))
	idx.setSlice(mcsSlice("prod", "db-c1", "db", "c1",
		endpoint("db-0", "10.1.0.1"), endpoint("db-1", "10.1.0.2"), endpoint("db-2", "10.1.0.3")))
	idx.setImport(clusterSetImport("prod", "novip", nil, port("http", corev1.ProtocolTCP, 80)))
	idx.setSlice(mcsSlice("prod", "novip-c1", "novip", "c1", endpoint("", "10.1.0.7"), endpoint("", "10.1.0.8")))
	idx.setSlice(mcsSlice("prod", "novip-c2", "novip", "c2", endpoint("", "10.2.0.7"), endpoint("", "10.2.0.8")))
	idx.markSynced()
	ts := startServer(t, idx, Config{LocalCluster: localCluster})

	firsts := map[string]bool{}
	var sets []string
	for range 3 {
		resp := ts.exchange(t, "udp", query("db.prod.svc.clusterset.local.", dns.TypeA))
		got := rrStrings(resp.Answer, true)
		if len(got) == 0 {
			t.Fatalf("no answer: %v", resp)
		}
		firsts[got[0]] = true
		slices.Sort(got)
		sets = append(sets, strings.Join(got, ";"))
	}
	if len(firsts) != 3 {
		t.Errorf("three answers started with %d distinct records, want 3: %v", len(firsts), firsts)
	}
	if sets[0] != sets[1] || sets[1] != sets[2] {
		t.Errorf("rotation changed the set of records: %q", sets)
	}

	t.Run("without ClusterSetIPs, each cluster's group turns but the local one stays first", func(t *testing.T) {
		localFirsts := map[string]bool{}
		for range 2 {
			resp := ts.exchange(t, "udp", query("novip.prod.svc.clusterset.local.", dns.TypeA))
			if len(resp.Answer) != 4 {
				t.Fatalf("answer = %v", resp.Answer)
			}
			var got []string
			for _, rr := range resp.Answer {
				got = append(got, rr.(*dns.A).A.String())
			}
			if !strings.HasPrefix(got[0], "10.1.") || !strings.HasPrefix(got[1], "10.1.") {
				t.Errorf("local endpoints are not first: %v", got)
			}
			localFirsts[got[0]] = true
		}
		if len(localFirsts) != 2 {
			t.Errorf("two answers started with the same local endpoint: %v", localFirsts)
		}
	})
}

// panicWriter is a ResponseWriter whose RemoteAddr panics, standing in for
// any bug on the request path.
type panicWriter struct {
	fakeWriter
}

func (panicWriter) RemoteAddr() net.Addr { panic("boom") }

func TestServeRecoversFromPanics(t *testing.T) {
	reg := prometheus.NewRegistry()
	srv, err := New(Config{Index: clustersetIndex(t), Registerer: reg, Logger: ktesting.NewLogger(t, ktesting.NewConfig())})
	if err != nil {
		t.Fatal(err)
	}
	w := &panicWriter{}
	srv.ServeDNS(w, query("web.prod.svc.clusterset.local.", dns.TypeA))
	if w.msg == nil || w.msg.Rcode != dns.RcodeServerFailure {
		t.Fatalf("answer = %v, want SERVFAIL", w.msg)
	}
	if got := testutil.ToFloat64(srv.metrics.panics); got != 1 {
		t.Errorf("panics counted %v, want 1", got)
	}
}

func TestServeMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	ts := startServer(t, clustersetIndex(t), Config{Registerer: reg})
	ts.exchange(t, "udp", query("web.prod.svc.clusterset.local.", dns.TypeA))
	ts.exchange(t, "tcp", query("web.prod.svc.clusterset.local.", dns.TypeA))
	ts.exchange(t, "udp", query("nope.prod.svc.clusterset.local.", dns.TypeAAAA))

	if got := testutil.ToFloat64(ts.metrics.queries.WithLabelValues("A", "NOERROR")); got != 2 {
		t.Errorf("A NOERROR queries = %v, want 2", got)
	}
	if got := testutil.ToFloat64(ts.metrics.queries.WithLabelValues("AAAA", "NXDOMAIN")); got != 1 {
		t.Errorf("AAAA NXDOMAIN queries = %v, want 1", got)
	}
	if n := testutil.CollectAndCount(ts.metrics.duration); n != 1 {
		t.Errorf("latency histogram: %d series", n)
	}
	want := `
# HELP mcsd_dns_index_endpoints Ready endpoint addresses held by the DNS index.
# TYPE mcsd_dns_index_endpoints gauge
mcsd_dns_index_endpoints 11
# HELP mcsd_dns_index_services ServiceImports held by the DNS index.
# TYPE mcsd_dns_index_services gauge
mcsd_dns_index_services 10
# HELP mcsd_dns_index_synced 1 once the DNS index holds the informers' initial lists, else 0 (queries get SERVFAIL).
# TYPE mcsd_dns_index_synced gauge
mcsd_dns_index_synced 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "mcsd_dns_index_endpoints", "mcsd_dns_index_services", "mcsd_dns_index_synced"); err != nil {
		t.Error(err)
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	idx := NewIndex(ktesting.NewLogger(t, ktesting.NewConfig()))
	for _, tc := range []struct {
		name string
		cfg  Config
	}{
		{"no index", Config{}},
		{"a TTL under a second", Config{Index: idx, TTL: time.Millisecond}},
		{"a reverse zone", Config{Index: idx, Zone: "10.in-addr.arpa"}},
		{"an NS name among the services", Config{Index: idx, NSName: "ns.svc.clusterset.local"}},
		{"a UDP size under 512", Config{Index: idx, MaxUDPSize: 100}},
		{"a cluster ID that is not a label", Config{Index: idx, LocalCluster: "a.b"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := New(tc.cfg); err == nil {
				t.Errorf("New(%+v) succeeded", tc.cfg)
			}
		})
	}
	t.Run("defaults", func(t *testing.T) {
		srv, err := New(Config{Index: idx, Zone: "Example.ORG"})
		if err != nil {
			t.Fatal(err)
		}
		if srv.cfg.Zone != "example.org." || srv.zone.ttl != 5 || srv.cfg.NSName != "ns.dns.example.org." {
			t.Errorf("zone %q ttl %d ns %q", srv.cfg.Zone, srv.zone.ttl, srv.cfg.NSName)
		}
	})
}

func TestRunListensOnUDPAndTCP(t *testing.T) {
	eachLoopback(t, func(t *testing.T, host string) {
		idx := clustersetIndex(t)
		// Find a port free on both transports.
		ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		srv, err := New(Config{Index: idx, Listen: addr})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- srv.Run(ctx) }()
		// The listeners come up asynchronously.
		for !srv.Ready() {
			select {
			case err := <-done:
				t.Fatalf("Run ended before serving: %v", err)
			case <-time.After(time.Millisecond):
			}
		}
		for _, network := range []string{"udp", "tcp"} {
			c := &dns.Client{Net: network, Timeout: time.Minute}
			resp, _, err := c.Exchange(query("web.prod.svc.clusterset.local.", dns.TypeA), addr)
			if err != nil || resp.Rcode != dns.RcodeSuccess || len(resp.Answer) != 1 {
				t.Errorf("%s: %v %v", network, resp, err)
			}
		}
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
}

func TestServeReverseZones(t *testing.T) {
	eachLoopback(t, func(t *testing.T, host string) {
		ts := startServerOn(t, clustersetIndex(t), Config{
			ReverseCIDRs: []netip.Prefix{
				netip.MustParsePrefix("243.0.0.0/8"),
				netip.MustParsePrefix("fd00:243::/48"),
				// Off an octet boundary: the enclosing zone, 10.in-addr.arpa.
				netip.MustParsePrefix("10.0.0.0/12"),
			},
		}, host)
		const (
			v4Zone  = "243.in-addr.arpa."
			v6Zone  = "0.0.0.0.3.4.2.0.0.0.d.f.ip6.arpa."
			podZone = "10.in-addr.arpa."
			ptrWeb6 = "0.1.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0." + v6Zone
		)
		ptrOutside, _ := dns.ReverseAddr("fd00:10:2::5")
		ptrUnknownOutside, _ := dns.ReverseAddr("fd00:10:2::99")
		rows := []row{
			{name: "PTR of a ClusterSetIP", q: "10.0.0." + v4Zone, qtype: dns.TypePTR,
				answer: []string{"10.0.0.243.in-addr.arpa. 5 IN PTR web.prod.svc"}},
			{name: "PTR of an IPv6 ClusterSetIP", q: ptrWeb6, qtype: dns.TypePTR,
				answer: []string{ptrWeb6 + " 5 IN PTR web.prod.svc"}},
			{name: "an address nobody serves is NXDOMAIN with the reverse zone's SOA", q: "99.0.0." + v4Zone, qtype: dns.TypePTR,
				rcode: dns.RcodeNameError, authority: v4Zone},
			{name: "an IPv6 address nobody serves is NXDOMAIN with the reverse zone's SOA", q: "9" + ptrWeb6[1:], qtype: dns.TypePTR,
				rcode: dns.RcodeNameError, authority: v6Zone},
			{name: "a served address without records of the type: NODATA with the zone's SOA", q: "10.0.0." + v4Zone, qtype: dns.TypeA,
				authority: v4Zone},
			{name: "the zone apex has its SOA", q: v4Zone, qtype: dns.TypeSOA,
				answer: []string{v4Zone + " 5 IN SOA ns.dns.clusterset.local. hostmaster.clusterset.local. 0 7200 1800 86400 5"}},
			{name: "the zone apex has its NS", q: v6Zone, qtype: dns.TypeNS,
				answer: []string{v6Zone + " 5 IN NS ns.dns.clusterset.local."}},
			{name: "a partial name above a served address exists", q: "0." + v4Zone, qtype: dns.TypePTR, authority: v4Zone},
			{name: "a partial name above no served address does not", q: "99." + v4Zone, qtype: dns.TypePTR,
				rcode: dns.RcodeNameError, authority: v4Zone},
			{name: "octets with leading zeros are no names", q: "010.0.0." + v4Zone, qtype: dns.TypePTR,
				rcode: dns.RcodeNameError, authority: v4Zone},
			{name: "too many labels are no names", q: "1.10.0.0." + v4Zone, qtype: dns.TypePTR,
				rcode: dns.RcodeNameError, authority: v4Zone},
			{name: "PTR of a headless endpoint in the enclosing zone of an off-boundary range", q: "1.0.1." + podZone, qtype: dns.TypePTR,
				answer: []string{"1.0.1.10.in-addr.arpa. 5 IN PTR db-0.c1.db.prod.svc"}},
			{name: "an endpoint without a name is NXDOMAIN in its zone", q: "1.0.3." + podZone, qtype: dns.TypePTR,
				rcode: dns.RcodeNameError, authority: podZone},
			{name: "outside the reverse zones, a served address is still answered", q: ptrOutside, qtype: dns.TypePTR,
				answer: []string{ptrOutside + " 5 IN PTR fd00-10-2--5.c2.db.prod.svc"}},
			{name: "outside the reverse zones, NODATA is the name's own", q: ptrOutside, qtype: dns.TypeA, authority: ptrOutside},
			{name: "outside the reverse zones, other addresses are not ours", q: ptrUnknownOutside, qtype: dns.TypePTR, rcode: dns.RcodeRefused},
			{name: "a reverse zone's parent is not ours", q: "in-addr.arpa.", qtype: dns.TypeSOA, rcode: dns.RcodeRefused},
		}
		for _, network := range []string{"udp", "tcp"} {
			t.Run(network, func(t *testing.T) {
				for _, r := range rows {
					t.Run(r.name, func(t *testing.T) {
						checkAnswer(t, r, ts.exchange(t, network, query(r.qname(), r.qtype)))
					})
				}
			})
		}
	})
}

func TestReverseZone(t *testing.T) {
	checkNames(t, "ReverseZone", func(s string) string { return ReverseZone(netip.MustParsePrefix(s)) }, map[string]string{
		"243.0.0.0/8":   "243.in-addr.arpa.",
		"10.96.0.0/12":  "10.in-addr.arpa.",
		"10.96.1.0/24":  "1.96.10.in-addr.arpa.",
		"fd00:243::/48": "0.0.0.0.3.4.2.0.0.0.d.f.ip6.arpa.",
		"fd00::/7":      "f.ip6.arpa.",
		"fd00::/8":      "d.f.ip6.arpa.",
	})
}

// RFC 2181 section 9: TC is set when the answer or authority section is
// incomplete, not when only additional records were left out.
func TestServeDoesNotTruncateForGlue(t *testing.T) {
	idx := NewIndex(ktesting.NewLogger(t, ktesting.NewConfig()))
	idx.setImport(headlessImport("prod", "db7", port("pg", corev1.ProtocolTCP, 5432)))
	var eps []discoveryv1.Endpoint
	for i := range 7 {
		// 8-character hostnames: the seven SRV records (whose targets are
		// never compressed) fit 512 bytes, their seven A records do not.
		eps = append(eps, endpoint(fmt.Sprintf("h%d-xxxxx", i), fmt.Sprintf("10.7.0.%d", i+1)))
	}
	idx.setSlice(mcsSlice("prod", "db7-c1", "db7", "c1", eps...))
	idx.markSynced()
	ts := startServer(t, idx, Config{})
	resp := ts.exchange(t, "udp", query("db7.prod.svc.clusterset.local.", dns.TypeSRV))
	if resp.Truncated || len(resp.Answer) != 7 {
		t.Fatalf("truncated=%v with %d SRV records; want every SRV record and no TC", resp.Truncated, len(resp.Answer))
	}
	if len(resp.Extra) == 0 || len(resp.Extra) >= 7 {
		t.Errorf("%d glue records, want some but not all (the test's sizes are off)", len(resp.Extra))
	}
	resp = ts.exchange(t, "tcp", query("db7.prod.svc.clusterset.local.", dns.TypeSRV))
	if resp.Truncated || len(resp.Answer) != 7 || len(resp.Extra) != 7 {
		t.Errorf("over TCP: truncated=%v with %d SRV and %d glue records, want 7 and 7", resp.Truncated, len(resp.Answer), len(resp.Extra))
	}
}

// RFC 6891 section 6.1.1: a query with more than one OPT record is
// answered FORMERR.
func TestServeTwoOPTRecords(t *testing.T) {
	ts := startServer(t, clustersetIndex(t), Config{})
	m := query("web.prod.svc.clusterset.local.", dns.TypeA)
	m.SetEdns0(1232, false)
	m.Extra = append(m.Extra, m.Extra[0])
	b, err := m.Pack()
	if err != nil {
		t.Fatal(err)
	}
	if resp := rawUDP(t, ts.udp, b); resp.Rcode != dns.RcodeFormatError || len(resp.Answer) != 0 {
		t.Errorf("rcode %s with %d answers, want FORMERR without answers", rcodeName(resp.Rcode), len(resp.Answer))
	}
}

// QCLASS ANY (RFC 1035 section 3.2.5) gets the records of class IN.
func TestServeClassANY(t *testing.T) {
	ts := startServer(t, clustersetIndex(t), Config{})
	for _, network := range []string{"udp", "tcp"} {
		m := query("web.prod.svc.clusterset.local.", dns.TypeA)
		m.Question[0].Qclass = dns.ClassANY
		resp := ts.exchange(t, network, m)
		if got, want := rrStrings(resp.Answer, false), rrStrings(mustRRs(t, "web.prod.svc 5 IN A 243.0.0.10"), false); resp.Rcode != dns.RcodeSuccess || !slices.Equal(got, want) {
			t.Errorf("%s: rcode %s answer %q, want %q", network, rcodeName(resp.Rcode), got, want)
		}
		if len(resp.Question) != 1 || resp.Question[0].Qclass != dns.ClassANY {
			t.Errorf("%s: question not echoed: %v", network, resp.Question)
		}
	}
}

// A name over 253 characters, such as a hostname in a 63-character
// cluster ID's <hostname>.<clusterid> name, is left out of answers rather
// than making the whole message one resolvers reject.
func TestServeLeavesOutNamesTooLong(t *testing.T) {
	long := func(c string) string { return strings.Repeat(c, 63) }
	ns, svcName, cluster := long("n"), long("s"), long("c")
	idx := NewIndex(ktesting.NewLogger(t, ktesting.NewConfig()))
	idx.setImport(headlessImport(ns, svcName, port("pg", corev1.ProtocolTCP, 5432)))
	idx.setSlice(mcsSlice(ns, "far", svcName, cluster, endpoint(long("h"), "10.8.0.1")))
	idx.setSlice(mcsSlice(ns, "near", svcName, "c1", endpoint("db-0", "10.8.0.2")))
	idx.markSynced()
	srv, err := New(Config{Index: idx, Registerer: prometheus.NewRegistry(), Logger: ktesting.NewLogger(t, ktesting.NewConfig()),
		ReverseCIDRs: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}})
	if err != nil {
		t.Fatal(err)
	}
	base := svcName + "." + ns + ".svc.clusterset.local."
	for _, tc := range []struct {
		name  string
		qtype uint16
		want  []string
		rcode int
	}{
		{base, dns.TypeSRV, []string{"SRV db-0.c1." + base}, dns.RcodeSuccess},
		{"_pg._tcp." + base, dns.TypeSRV, []string{"SRV db-0.c1." + base}, dns.RcodeSuccess},
		{base, dns.TypeA, []string{"A 10.8.0.1", "A 10.8.0.2"}, dns.RcodeSuccess},
		{"1.0.8.10.in-addr.arpa.", dns.TypePTR, nil, dns.RcodeNameError},
		{"2.0.8.10.in-addr.arpa.", dns.TypePTR, []string{"PTR db-0.c1." + base}, dns.RcodeSuccess},
	} {
		for _, udp := range []bool{true, false} {
			m := srv.reply(query(tc.name, tc.qtype), udp)
			b, err := m.Pack()
			if err != nil {
				t.Errorf("%s %s: the answer does not pack: %v", tc.name, dns.TypeToString[tc.qtype], err)
				continue
			}
			resp := new(dns.Msg)
			if err := resp.Unpack(b); err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, rr := range resp.Answer {
				switch rr := rr.(type) {
				case *dns.SRV:
					got = append(got, "SRV "+rr.Target)
				case *dns.A:
					got = append(got, "A "+rr.A.String())
				case *dns.PTR:
					got = append(got, "PTR "+rr.Ptr)
				}
			}
			slices.Sort(got)
			if resp.Rcode != tc.rcode || !slices.Equal(got, tc.want) {
				t.Errorf("%s %s: %s %q, want %s %q", tc.name, dns.TypeToString[tc.qtype], rcodeName(resp.Rcode), got, rcodeName(tc.rcode), tc.want)
			}
		}
	}
}
