package dns

import (
	"encoding/binary"
	"net"
	"testing"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/klog/v2"
)

// fakeWriter is a ResponseWriter that keeps what is written.
type fakeWriter struct {
	tcp bool
	msg *dns.Msg
}

func (w *fakeWriter) LocalAddr() net.Addr {
	return &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 53}
}

func (w *fakeWriter) RemoteAddr() net.Addr {
	if w.tcp {
		return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 40000}
	}
	return &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 40000}
}

func (w *fakeWriter) WriteMsg(m *dns.Msg) error { w.msg = m; return nil }
func (w *fakeWriter) Write([]byte) (int, error) { return 0, nil }
func (w *fakeWriter) Close() error              { return nil }
func (w *fakeWriter) TsigStatus() error         { return nil }
func (w *fakeWriter) TsigTimersOnly(bool)       {}
func (w *fakeWriter) Hijack()                   {}

// FuzzServeDNS feeds arbitrary bytes to the request path as the listeners
// do: what miekg/dns parses goes to ServeDNS, what it cannot parse is
// answered FORMERR by miekg/dns (covered by TestServeMalformedQueries).
// Every answer must be a well-formed response to the question asked, with a
// legal rcode, that fits the transport, and packs and unpacks.
func FuzzServeDNS(f *testing.F) {
	idx := clustersetIndex(f)
	srv, err := New(Config{Index: idx, LocalCluster: localCluster, Registerer: prometheus.NewRegistry(), Logger: klog.Background()})
	if err != nil {
		f.Fatal(err)
	}
	seed := func(name string, qtype uint16, edns bool) {
		m := query(name, qtype)
		if edns {
			m.SetEdns0(4096, true)
		}
		b, err := m.Pack()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, false)
		f.Add(b, true)
	}
	for _, q := range []struct {
		name  string
		qtype uint16
	}{
		{"clusterset.local.", dns.TypeSOA},
		{"clusterset.local.", dns.TypeNS},
		{"dns-version.clusterset.local.", dns.TypeTXT},
		{"web.prod.svc.clusterset.local.", dns.TypeA},
		{"web.prod.svc.clusterset.local.", dns.TypeAAAA},
		{"web.prod.svc.clusterset.local.", dns.TypeSRV},
		{"_http._tcp.web.prod.svc.clusterset.local.", dns.TypeSRV},
		{"_tcp.web.prod.svc.clusterset.local.", dns.TypeSRV},
		{"db.prod.svc.clusterset.local.", dns.TypeA},
		{"db.prod.svc.clusterset.local.", dns.TypeSRV},
		{"db-0.c2.db.prod.svc.clusterset.local.", dns.TypeAAAA},
		{"c1.db.prod.svc.clusterset.local.", dns.TypeA},
		{"novip.prod.svc.clusterset.local.", dns.TypeANY},
		{"prod.svc.clusterset.local.", dns.TypeA},
		{"10.0.0.243.in-addr.arpa.", dns.TypePTR},
		{"5.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.2.0.0.0.0.1.0.0.0.0.0.0.0.0.d.f.ip6.arpa.", dns.TypePTR},
		{"example.com.", dns.TypeA},
		{`a\.b.prod.svc.clusterset.local.`, dns.TypeA},
	} {
		seed(q.name, q.qtype, false)
		seed(q.name, q.qtype, true)
	}
	f.Add([]byte{0xbe, 0xef, 0x01, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xff}, false)

	f.Fuzz(func(t *testing.T, b []byte, tcp bool) {
		req := new(dns.Msg)
		if err := req.Unpack(b); err != nil {
			return
		}
		// What the listeners' accept check turns away never reaches
		// ServeDNS.
		h := dns.Header{
			Id:      binary.BigEndian.Uint16(b[0:]),
			Bits:    binary.BigEndian.Uint16(b[2:]),
			Qdcount: binary.BigEndian.Uint16(b[4:]),
			Ancount: binary.BigEndian.Uint16(b[6:]),
			Nscount: binary.BigEndian.Uint16(b[8:]),
			Arcount: binary.BigEndian.Uint16(b[10:]),
		}
		if acceptQuery(h) != dns.MsgAccept {
			return
		}
		w := &fakeWriter{tcp: tcp}
		srv.ServeDNS(w, req)
		resp := w.msg
		if resp == nil {
			t.Fatalf("no answer to %v", req)
		}
		if !resp.Response || resp.Id != req.Id || resp.Opcode != req.Opcode {
			t.Fatalf("not a response to the query: %v", resp)
		}
		if len(req.Question) == 1 && (len(resp.Question) != 1 || resp.Question[0] != req.Question[0]) {
			t.Fatalf("question %v answered as %v", req.Question, resp.Question)
		}
		switch resp.Rcode {
		case dns.RcodeSuccess, dns.RcodeNameError, dns.RcodeRefused, dns.RcodeFormatError, dns.RcodeBadVers:
		default:
			t.Fatalf("rcode %s for %v", rcodeName(resp.Rcode), req.Question)
		}
		packed, err := resp.Pack()
		if err != nil {
			t.Fatalf("answer does not pack: %v\n%v", err, resp)
		}
		limit := dns.MaxMsgSize
		if !tcp {
			limit = DefaultMaxUDPSize
			if req.IsEdns0() == nil {
				limit = dns.MinMsgSize
			}
		}
		if len(packed) > limit {
			t.Fatalf("%d-byte answer over a %d-byte limit", len(packed), limit)
		}
		if err := new(dns.Msg).Unpack(packed); err != nil {
			t.Fatalf("answer does not unpack: %v", err)
		}
	})
}
