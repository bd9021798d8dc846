package dns

import (
	"net"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// packQuery is q in wire format, with an EDNS0 OPT record when edns.
func packQuery(t testing.TB, name string, qtype uint16, edns bool) []byte {
	t.Helper()
	m := query(name, qtype)
	if edns {
		m.SetEdns0(1232, false)
	}
	b, err := m.Pack()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The fast path must take the common queries, or FuzzServeDNS compares
// nothing.
func TestFastPathTakesCommonQueries(t *testing.T) {
	srv := fuzzServer(t)
	out := make([]byte, dns.MaxMsgSize)
	for _, q := range fastQueries {
		for _, edns := range []bool{false, true} {
			for _, tcp := range []bool{false, true} {
				if _, _, _, ok := srv.fastAnswer(packQuery(t, q.name, q.qtype, edns), out, tcp); !ok {
					t.Errorf("the fast path does not take %s %s (EDNS0 %v, TCP %v)", q.name, dns.TypeToString[q.qtype], edns, tcp)
				}
			}
		}
	}
	for _, q := range []nameType{
		{"web.prod.svc.clusterset.local.", dns.TypeANY},
		{"example.com.", dns.TypeA},
		{"clusterset.local.", dns.TypeSOA},
	} {
		if _, _, _, ok := srv.fastAnswer(packQuery(t, q.name, q.qtype, false), out, false); ok {
			t.Errorf("the fast path takes %s %s, which it leaves to the full path", q.name, dns.TypeToString[q.qtype])
		}
	}
}

// The fast path's answer to a name changes when the Index publishes its
// service again.
func TestFastPathFollowsTheIndex(t *testing.T) {
	srv := fuzzServer(t)
	out := make([]byte, dns.MaxMsgSize)
	ask := func() *dns.Msg {
		t.Helper()
		n, _, _, ok := srv.fastAnswer(packQuery(t, "web.prod.svc.clusterset.local.", dns.TypeA, false), out, false)
		if !ok {
			t.Fatal("the fast path does not take web A")
		}
		m := new(dns.Msg)
		if err := m.Unpack(out[:n]); err != nil {
			t.Fatal(err)
		}
		return m
	}
	if got := rrStrings(ask().Answer, false); len(got) != 1 {
		t.Fatalf("answer %v", got)
	}
	srv.index.setImport(clusterSetImport("prod", "web", []string{"243.0.0.99"}, port("http", "TCP", 80)))
	if got, want := rrStrings(ask().Answer, false), rrStrings(mustRRs(t, "web.prod.svc 5 IN A 243.0.0.99"), false); len(got) != 1 || got[0] != want[0] {
		t.Errorf("after the ServiceImport changed: %v, want %v", got, want)
	}
	srv.index.deleteImport("prod", "web")
	if m := ask(); m.Rcode != dns.RcodeNameError {
		t.Errorf("after the ServiceImport was deleted: %v", m)
	}
}

// The fast path allocates nothing. A testing.AllocsPerRun count is exact,
// whatever the machine's speed.
func TestFastPathDoesNotAllocate(t *testing.T) {
	srv := fuzzServer(t)
	out := make([]byte, dns.MaxMsgSize)
	for _, q := range fastQueries {
		b := packQuery(t, q.name, q.qtype, true)
		srv.fastAnswer(b, out, false) // counters are resolved on first use
		if n := testing.AllocsPerRun(100, func() {
			_, fq, rcode, _ := srv.fastAnswer(b, out, false)
			srv.metrics.count(int(fq.qtype), rcode)
		}); n != 0 {
			t.Errorf("%s %s: %v allocations per query", q.name, dns.TypeToString[q.qtype], n)
		}
	}
}

// BenchmarkFastPath is the handler cost of the common query kinds, without
// the sockets.
func BenchmarkFastPath(b *testing.B) {
	srv := fuzzServer(b)
	out := make([]byte, dns.MaxMsgSize)
	for _, q := range []struct {
		kind, name string
		qtype      uint16
	}{
		{"A", "web.prod.svc.clusterset.local.", dns.TypeA},
		{"SRV-named", "_http._tcp.web.prod.svc.clusterset.local.", dns.TypeSRV},
		{"headless-A", "db.prod.svc.clusterset.local.", dns.TypeA},
		{"per-host", "db-0.c1.db.prod.svc.clusterset.local.", dns.TypeA},
		{"PTR", "10.0.0.243.in-addr.arpa.", dns.TypePTR},
		{"NXDOMAIN", "nope.prod.svc.clusterset.local.", dns.TypeA},
	} {
		query := packQuery(b, q.name, q.qtype, false)
		b.Run(q.kind, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_, fq, rcode, ok := srv.fastAnswer(query, out, false)
				if !ok {
					b.Fatal("not on the fast path")
				}
				srv.metrics.count(int(fq.qtype), rcode)
			}
		})
		b.Run(q.kind+"/full", func(b *testing.B) {
			b.ReportAllocs()
			w := &fakeWriter{}
			for b.Loop() {
				srv.serveSlow(query, w)
			}
		})
	}
}

// Queries that arrive together, over UDP or one after the other on a TCP
// connection, are read and answered in batches; each gets its own answer,
// to its own address, whichever path answers it.
func TestServeQueriesArrivingTogether(t *testing.T) {
	for _, network := range []string{"udp4", "udp6", "tcp", "tcp6"} {
		t.Run(network, func(t *testing.T) {
			family, addr := "4", "127.0.0.1:0"
			if strings.HasSuffix(network, "6") {
				family, addr = "6", "[::1]:0"
			}
			pc, err := net.ListenPacket("udp"+family, addr)
			if err != nil {
				t.Skipf("no %s loopback: %v", network, err)
			}
			ln, err := net.Listen("tcp"+family, addr)
			if err != nil {
				t.Fatal(err)
			}
			server := pc.LocalAddr().String()
			if strings.HasPrefix(network, "tcp") {
				server = ln.Addr().String()
			}
			serveUntilCleanup(t, fuzzServer(t), pc, ln)

			nc, err := net.Dial(network, server)
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			// Over TCP, queries follow each other on the connection.
			c := &dns.Conn{Conn: nc}
			// Batches' worth of queries, fast and full path mixed: every
			// fourth asks ANY, which only the full path answers.
			const n = 64
			want := map[uint16]string{}
			for i := range n {
				q := fastQueries[i%len(fastQueries)]
				if i%4 == 3 {
					q.qtype = dns.TypeANY
				}
				m := query(q.name, q.qtype)
				m.Id = uint16(i + 1)
				want[m.Id] = dns.TypeToString[q.qtype] + " " + q.name
				if err := c.WriteMsg(m); err != nil {
					t.Fatal(err)
				}
			}
			// Only guards against a hung test.
			_ = c.SetReadDeadline(time.Now().Add(time.Minute))
			for range n {
				resp, err := c.ReadMsg()
				if err != nil {
					t.Fatalf("%d answers missing: %v", len(want), err)
				}
				q, ok := want[resp.Id]
				if !ok {
					t.Fatalf("answer to no query, or a second one: id %d", resp.Id)
				}
				if got := dns.TypeToString[resp.Question[0].Qtype] + " " + resp.Question[0].Name; got != q {
					t.Errorf("id %d asked %s, answered %s", resp.Id, q, got)
				}
				delete(want, resp.Id)
			}
		})
	}
}
