package dns

import (
	"testing"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2/ktesting"
)

// A gated Index hands out a ClusterSetIP only once the data plane reports
// it carried, and takes it back when the data plane drops it.
func TestGatedIndexHandsOutOnlyCarriedClusterSetIPs(t *testing.T) {
	idx := NewIndex(ktesting.NewLogger(t, ktesting.NewConfig()))
	idx.GateVIPs(corev1.IPv4Protocol)
	idx.setImport(clusterSetImport("prod", "web", []string{"243.0.0.10"}, port("http", corev1.ProtocolTCP, 80)))
	idx.setImport(clusterSetImport("prod", "dual", []string{"243.0.0.11", "fd00::11"}, port("http", corev1.ProtocolTCP, 80)))
	idx.setImport(headlessImport("prod", "db", port("pg", corev1.ProtocolTCP, 5432)))
	idx.setSlice(mcsSlice("prod", "db-c1", "db", "c1", endpoint("", "10.1.0.5")))
	idx.markSynced()
	ts := startServer(t, idx, Config{})

	webA := query("web.prod.svc.clusterset.local.", dns.TypeA)
	if resp := ts.exchange(t, "udp", webA); resp.Rcode != dns.RcodeServerFailure {
		t.Fatalf("before the proxier's first report: rcode = %s, want SERVFAIL", rcodeName(resp.Rcode))
	}
	if ts.Ready() {
		t.Fatalf("Ready() before the proxier's first report")
	}

	// The first sync carried nothing yet: the name does not exist, but
	// headless names are served.
	idx.VIPsProgrammed(corev1.IPv4Protocol, nil, nil)
	for _, q := range []*dns.Msg{
		webA,
		query("web.prod.svc.clusterset.local.", dns.TypeAAAA),
		query("_http._tcp.web.prod.svc.clusterset.local.", dns.TypeSRV),
	} {
		if resp := ts.exchange(t, "udp", q); resp.Rcode != dns.RcodeNameError {
			t.Errorf("before the ClusterSetIP is carried, %v: rcode = %s, want NXDOMAIN", q.Question[0], rcodeName(resp.Rcode))
		}
	}
	if resp := ts.exchange(t, "udp", query("10.0.0.243.in-addr.arpa.", dns.TypePTR)); len(resp.Answer) != 0 {
		t.Errorf("PTR before the ClusterSetIP is carried: %v", resp.Answer)
	}
	// A dual-stack service whose IPv4 ClusterSetIP is not carried yet: its
	// IPv6 one, of a family no proxier of this node serves, is.
	if resp := ts.exchange(t, "udp", query("dual.prod.svc.clusterset.local.", dns.TypeA)); resp.Rcode != dns.RcodeSuccess || len(resp.Answer) != 0 {
		t.Errorf("dual-stack A before its IPv4 ClusterSetIP is carried: want NODATA, got %v", resp)
	}
	resp := ts.exchange(t, "udp", query("dual.prod.svc.clusterset.local.", dns.TypeAAAA))
	if got, want := rrStrings(resp.Answer, false), rrStrings(mustRRs(t, "dual.prod.svc AAAA fd00::11"), false); !equalStrings(got, want) {
		t.Errorf("ungated family: AAAA = %v, want %v", got, want)
	}
	if resp := ts.exchange(t, "udp", query("db.prod.svc.clusterset.local.", dns.TypeA)); resp.Rcode != dns.RcodeSuccess || len(resp.Answer) != 1 {
		t.Errorf("headless name while the ClusterSetIP is not carried: %v", resp)
	}

	idx.VIPsProgrammed(corev1.IPv4Protocol, addrs("243.0.0.10"), nil)
	resp = ts.exchange(t, "udp", webA)
	if got, want := rrStrings(resp.Answer, false), rrStrings(mustRRs(t, "web.prod.svc A 243.0.0.10"), false); !equalStrings(got, want) {
		t.Errorf("once carried: A = %v, want %v", got, want)
	}
	if resp := ts.exchange(t, "udp", query("10.0.0.243.in-addr.arpa.", dns.TypePTR)); resp.Rcode != dns.RcodeSuccess || len(resp.Answer) != 1 {
		t.Errorf("PTR once carried: %v", resp)
	}

	idx.VIPsProgrammed(corev1.IPv4Protocol, nil, addrs("243.0.0.10"))
	if resp := ts.exchange(t, "udp", query("10.0.0.243.in-addr.arpa.", dns.TypePTR)); len(resp.Answer) != 0 {
		t.Errorf("PTR after the proxier dropped the ClusterSetIP: %v", resp.Answer)
	}
	if resp := ts.exchange(t, "udp", webA); resp.Rcode != dns.RcodeNameError {
		t.Errorf("A after the proxier dropped the ClusterSetIP: rcode = %s, want NXDOMAIN", rcodeName(resp.Rcode))
	}
}

// A ClusterSetIP carried before its ServiceImport reaches DNS is handed out
// as soon as the ServiceImport arrives.
func TestGatedIndexRemembersCarriedClusterSetIPs(t *testing.T) {
	idx := NewIndex(ktesting.NewLogger(t, ktesting.NewConfig()))
	idx.GateVIPs(corev1.IPv4Protocol, corev1.IPv6Protocol)
	idx.markSynced()
	idx.VIPsProgrammed(corev1.IPv4Protocol, addrs("243.0.0.20"), nil)
	if idx.Synced() {
		t.Fatalf("synced before the IPv6 proxier reported")
	}
	idx.VIPsProgrammed(corev1.IPv6Protocol, nil, nil)
	if !idx.Synced() {
		t.Fatalf("not synced once both families reported")
	}
	idx.setImport(clusterSetImport("prod", "api", []string{"243.0.0.20"}, port("http", corev1.ProtocolTCP, 80)))
	ts := startServer(t, idx, Config{})
	if resp := ts.exchange(t, "tcp", query("api.prod.svc.clusterset.local.", dns.TypeA)); resp.Rcode != dns.RcodeSuccess || len(resp.Answer) != 1 {
		t.Errorf("a ServiceImport whose ClusterSetIP is already carried: %v", resp)
	}
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
