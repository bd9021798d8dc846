package dns

import (
	"slices"
	"strings"
	"testing"

	"github.com/miekg/dns"

	"github.com/mcsd-io/mcsd/mcsslice"
)

func TestGoneClustersAreNotServed(t *testing.T) {
	idx := clustersetIndex(t)
	ts := startServer(t, idx, Config{LocalCluster: localCluster})
	answers := func(name string, qtype uint16) []string {
		t.Helper()
		resp := ts.exchange(t, "udp", query(name, qtype))
		return rrStrings(resp.Answer, false)
	}
	dbAll := answers("db.prod.svc.clusterset.local.", dns.TypeA)
	if len(dbAll) != 4 {
		t.Fatalf("db A before any cluster is gone: %v, want c1's three and c2's one", dbAll)
	}

	// Cluster IDs are matched whatever their case.
	idx.SetGoneClusters(mcsslice.NewGoneClusters("C2"))
	dbLive := answers("db.prod.svc.clusterset.local.", dns.TypeA)
	for _, rr := range dbLive {
		if strings.HasSuffix(rr, "\t10.2.0.1") {
			t.Fatalf("db A with c2 gone still has c2's endpoint: %v", dbLive)
		}
	}
	if len(dbLive) != 3 {
		t.Fatalf("db A with c2 gone: %v, want c1's three", dbLive)
	}
	if got := answers("db.prod.svc.clusterset.local.", dns.TypeAAAA); len(got) != 0 {
		t.Fatalf("db AAAA with c2 gone: %v, want none (only c2 has IPv6 endpoints)", got)
	}
	if resp := ts.exchange(t, "udp", query("db-0.c2.db.prod.svc.clusterset.local.", dns.TypeA)); resp.Rcode != dns.RcodeNameError {
		t.Fatalf("db-0.c2 with c2 gone: %s, want NXDOMAIN", rcodeName(resp.Rcode))
	}
	if got := answers("novip.prod.svc.clusterset.local.", dns.TypeA); len(got) != 1 {
		t.Fatalf("novip A with c2 gone: %v, want c1's endpoint only", got)
	}
	if got := answers("web.prod.svc.clusterset.local.", dns.TypeA); len(got) != 1 {
		t.Fatalf("a ClusterSetIP service's VIP does not depend on liveness: %v", got)
	}

	idx.SetGoneClusters(mcsslice.NewGoneClusters())
	if got := answers("db.prod.svc.clusterset.local.", dns.TypeA); !slices.Equal(sortedCopy(got), sortedCopy(dbAll)) {
		t.Fatalf("db A once c2 is back: %v, want %v", got, dbAll)
	}
	if resp := ts.exchange(t, "udp", query("db-0.c2.db.prod.svc.clusterset.local.", dns.TypeA)); resp.Rcode != dns.RcodeSuccess || len(resp.Answer) != 1 {
		t.Fatalf("db-0.c2 once c2 is back: %s %v", rcodeName(resp.Rcode), resp.Answer)
	}
}

func sortedCopy(s []string) []string {
	c := slices.Clone(s)
	slices.Sort(c)
	return c
}
