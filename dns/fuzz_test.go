package dns

import (
	"bytes"
	"net"
	"net/netip"
	"slices"
	"testing"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/klog/v2"
)

// fakeWriter is a ResponseWriter that keeps what is written.
type fakeWriter struct {
	noTsig
	tcp bool
	msg *dns.Msg
	b   []byte
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

func (w *fakeWriter) WriteMsg(m *dns.Msg) error { return writeMsg(w, m) }

// Write keeps the bytes and, when they parse, the message.
func (w *fakeWriter) Write(b []byte) (int, error) {
	w.b = slices.Clone(b)
	m := new(dns.Msg)
	if err := m.Unpack(b); err == nil {
		w.msg = m
	}
	return len(b), nil
}
func (w *fakeWriter) Close() error { return nil }

// fuzzServer is the server of FuzzServeDNS and of the fast path's tests:
// the table tests' data, reverse zones for the clusterset CIDRs, and the
// name server's addresses.
func fuzzServer(t testing.TB) *Server {
	srv, err := New(Config{
		Index:        clustersetIndex(t),
		LocalCluster: localCluster,
		NSAddresses:  addrs("10.0.0.53", "fd00::53"),
		ReverseCIDRs: []netip.Prefix{netip.MustParsePrefix("243.0.0.0/8"), netip.MustParsePrefix("fd00:243::/48")},
		Registerer:   prometheus.NewRegistry(),
		Logger:       klog.Background(),
	})
	if err != nil {
		t.Fatal(err)
	}
	return srv
}

// nameType is a question: a name and a type.
type nameType struct {
	name  string
	qtype uint16
}

// fastQueries are questions the fast path answers, each in a form it takes.
var fastQueries = []nameType{
	{"web.prod.svc.clusterset.local.", dns.TypeA},
	{"Web.PROD.svc.clusterset.local.", dns.TypeAAAA},
	{"web.prod.svc.clusterset.local.", dns.TypeSRV},
	{"web.prod.svc.clusterset.local.", dns.TypeTXT},
	{"_http._tcp.web.prod.svc.clusterset.local.", dns.TypeSRV},
	{"_tcp.web.prod.svc.clusterset.local.", dns.TypeSRV},
	{"db.prod.svc.clusterset.local.", dns.TypeA},
	{"db.prod.svc.clusterset.local.", dns.TypeAAAA},
	{"db-0.c2.db.prod.svc.clusterset.local.", dns.TypeAAAA},
	{"db-0.c1.db.prod.svc.clusterset.local.", dns.TypeA},
	{"c1.db.prod.svc.clusterset.local.", dns.TypeA},
	{"novip.prod.svc.clusterset.local.", dns.TypeA},
	{"prod.svc.clusterset.local.", dns.TypeA},
	{"nope.prod.svc.clusterset.local.", dns.TypeA},
	{"a.b.c.d.e.f.svc.clusterset.local.", dns.TypeSRV},
	{"10.0.0.243.in-addr.arpa.", dns.TypePTR},
	{"1.0.1.10.in-addr.arpa.", dns.TypePTR},
	{"10.0.0.243.in-addr.arpa.", dns.TypeA},
	{"0.1.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.3.4.2.0.0.0.d.f.ip6.arpa.", dns.TypePTR},
}

// FuzzServeDNS feeds arbitrary bytes to the request path as the listeners
// do, and checks two things. The fast path, whenever it takes a query,
// gives the answer the full path gives, byte for byte. The full path
// (miekg/dns parsing, then ServeDNS) gives every query it parses a
// well-formed response to the question asked, with a legal rcode, that
// fits the transport, and packs and unpacks; what miekg/dns cannot parse
// is answered FORMERR when it has a header (TestServeMalformedQueries).
func FuzzServeDNS(f *testing.F) {
	srv := fuzzServer(f)
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
	for _, q := range fastQueries {
		seed(q.name, q.qtype, false)
		seed(q.name, q.qtype, true)
	}
	for _, q := range []nameType{
		{"clusterset.local.", dns.TypeSOA},
		{"clusterset.local.", dns.TypeNS},
		{"dns-version.clusterset.local.", dns.TypeTXT},
		{"web.prod.svc.clusterset.local.", dns.TypeANY},
		{"db.prod.svc.clusterset.local.", dns.TypeSRV},
		{"novip.prod.svc.clusterset.local.", dns.TypeANY},
		{"99.0.0.243.in-addr.arpa.", dns.TypePTR},
		{"243.in-addr.arpa.", dns.TypeSOA},
		{"0.243.in-addr.arpa.", dns.TypePTR},
		{"5.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.2.0.0.0.0.1.0.0.0.0.0.0.0.0.d.f.ip6.arpa.", dns.TypePTR},
		{"example.com.", dns.TypeA},
		{`a\.b.prod.svc.clusterset.local.`, dns.TypeA},
	} {
		seed(q.name, q.qtype, false)
		seed(q.name, q.qtype, true)
	}
	f.Add([]byte{0xbe, 0xef, 0x01, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xff}, false)

	out := make([]byte, DefaultMaxUDPSize)
	f.Fuzz(func(t *testing.T, b []byte, tcp bool) {
		const turn = 7
		srv.rotation.Store(turn)
		n, _, _, fast := srv.fastAnswer(b, out, tcp)
		srv.rotation.Store(turn)
		fw := &fakeWriter{tcp: tcp}
		srv.serveSlow(b, fw)
		if fast && !bytes.Equal(out[:n], fw.b) {
			fastMsg, fullMsg := new(dns.Msg), new(dns.Msg)
			fastErr, fullErr := fastMsg.Unpack(out[:n]), fullMsg.Unpack(fw.b)
			t.Fatalf("the fast path's answer differs from the full path's (TCP %v)\nfast (%v):\n%x\n%v\nfull (%v):\n%x\n%v", tcp, fastErr, out[:n], fastMsg, fullErr, fw.b, fullMsg)
		}

		req := new(dns.Msg)
		if err := req.Unpack(b); err != nil {
			return
		}
		// What the listeners' accept check turns away never reaches
		// ServeDNS.
		if acceptQuery(header(b)) != dns.MsgAccept {
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
		limit := dns.MaxMsgSize
		if !tcp {
			limit = DefaultMaxUDPSize
			if req.IsEdns0() == nil {
				limit = dns.MinMsgSize
			}
		}
		if len(w.b) > limit {
			t.Fatalf("%d-byte answer over a %d-byte limit", len(w.b), limit)
		}
	})
}
