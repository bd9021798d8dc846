package dns

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/netip"
	"time"

	"github.com/miekg/dns"
)

// The UDP fast path. The common query (one question, class IN, opcode
// QUERY, no EDNS or EDNS version 0 without options, about a name whose
// answers are packed, fitting the buffer without truncation) is answered by
// copying its packed answer and patching it: ID, RD and CD bits, the
// question as asked, the SOA serial, the turn of multi-address answers, and
// an OPT record. It allocates nothing. Everything else goes to the full
// path, miekg/dns parsing and ServeDNS, which gives the same answer to
// whatever the fast path takes (FuzzServeDNS checks it).

// nxTemplate is the NXDOMAIN answer to a name under svc.<zone>, packed for
// the question probe.svc.<zone>; the compression pointers into the
// question's zone suffix move with the length of the name asked.
type nxTemplate struct {
	packedAnswer
	// qlen is the length of the probe name in wire format.
	qlen int
	// suffix is where, in the probe name, svc.<zone> starts.
	suffix int
}

// nxProbe is the first label of the name the NXDOMAIN template is packed
// for; no compression pointer may point at it.
const nxProbe = "0"

func (s *Server) newNXTemplate() *nxTemplate {
	probe := nxProbe + ".svc." + s.zone.names.origin
	m := new(dns.Msg)
	m.Response = true
	m.Authoritative = true
	m.Question = []dns.Question{{Name: probe, Qtype: otherType, Qclass: dns.ClassINET}}
	s.zone.nxdomain(m, s.zone.names.origin)
	m.Compress = true
	b, err := m.Pack()
	if err != nil {
		return nil
	}
	t := &nxTemplate{packedAnswer: packedAnswer{msg: b, rcode: m.Rcode, serial: soaSerialOffset(b)}}
	t.qlen = len(wireName(probe))
	t.suffix = headerLen + 1 + len(nxProbe)
	// Every pointer after the question must point into svc.<zone>: into
	// the question's suffix, or past the question.
	ok := true
	pointer := func(p int) {
		t.pointers = append(t.pointers, p)
		ok = ok && int(binary.BigEndian.Uint16(b[p:])&0x3FFF) >= t.suffix
	}
	off := headerLen + t.qlen + 4
	for off < len(b) {
		off = namePointers(b, off, pointer)
		if off+10 > len(b) {
			break
		}
		rdlen := int(binary.BigEndian.Uint16(b[off+8:]))
		rdata := off + 10
		if binary.BigEndian.Uint16(b[off:]) == dns.TypeSOA {
			namePointers(b, namePointers(b, rdata, pointer), pointer)
		}
		off = rdata + rdlen
	}
	if !ok {
		return nil
	}
	return t
}

// fastQuery is what the fast path reads of a query.
type fastQuery struct {
	qend  int // offset after the question
	nend  int // offset after the question name
	qtype uint16
	edns  bool
	do    bool
	size  int // the UDP payload size the client accepts
}

// parseFast reads a query the fast path can take, or says false.
func parseFast(q []byte) (fq fastQuery, ok bool) {
	if len(q) < headerLen+5 {
		return fq, false
	}
	// QR 0, opcode QUERY; one question; no answer or authority records; at
	// most the OPT record in the additional section.
	if q[2]&0xF8 != 0 || binary.BigEndian.Uint16(q[4:]) != 1 || q[6]|q[7]|q[8]|q[9] != 0 || q[10] != 0 || q[11] > 1 {
		return fq, false
	}
	off := headerLen
	for {
		if off >= len(q) {
			return fq, false
		}
		l := int(q[off])
		if l == 0 {
			break
		}
		if l&0xC0 != 0 {
			return fq, false
		}
		off += 1 + l
	}
	off++
	if off-headerLen > 255 || off+4 > len(q) {
		return fq, false
	}
	fq.nend = off
	fq.qtype = binary.BigEndian.Uint16(q[off:])
	if binary.BigEndian.Uint16(q[off+2:]) != dns.ClassINET {
		return fq, false
	}
	switch fq.qtype {
	case dns.TypeOPT, dns.TypeANY, dns.TypeAXFR, dns.TypeIXFR, dns.TypeMAILA, dns.TypeMAILB:
		return fq, false
	}
	fq.qend = off + 4
	fq.size = dns.MinMsgSize
	if q[11] == 0 {
		return fq, fq.qend == len(q)
	}
	// The OPT record: root name, type, class (size), TTL (extended rcode,
	// version, flags), no options.
	o := fq.qend
	if o+11 != len(q) || q[o] != 0 || binary.BigEndian.Uint16(q[o+1:]) != dns.TypeOPT || q[o+6] != 0 || q[o+9]|q[o+10] != 0 {
		return fq, false
	}
	fq.edns = true
	fq.size = max(int(binary.BigEndian.Uint16(q[o+3:])), dns.MinMsgSize)
	fq.do = q[o+7]&0x80 != 0
	return fq, true
}

// fastAnswer writes the answer to q, received over TCP or UDP, into out and
// returns its length and rcode, or ok=false when the full path must answer.
// out must hold Config.MaxUDPSize bytes.
func (s *Server) fastAnswer(q, out []byte, tcp bool) (n int, fq fastQuery, rcode int, ok bool) {
	p := s.index.packed.Load()
	if p == nil || p.zone != s.zone || !s.index.Synced() {
		return 0, fq, 0, false
	}
	fq, ok = parseFast(q)
	if !ok {
		return 0, fq, 0, false
	}
	var keyBuf [256]byte
	name := q[headerLen:fq.nend]
	key := keyBuf[:len(name)]
	for i, c := range name {
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		key[i] = c
	}
	// The answer, without OPT, must fit this.
	limit := dns.MinMsgSize
	switch {
	case tcp:
		limit = len(out) - optLen
	case fq.edns:
		limit = min(fq.size, s.cfg.MaxUDPSize) - optLen
	}
	var a *packedAnswer
	if e := p.table.get(key); e != nil {
		a = e.answer(fq.qtype)
		if a == nil || len(a.msg) > limit {
			return 0, fq, 0, false
		}
		n = copy(out, a.msg)
		if a.serial > 0 {
			binary.BigEndian.PutUint32(out[a.serial:], s.index.generation.Load())
		}
		if a.rotate {
			turn := s.nextTurn()
			for _, g := range a.groups {
				k := int(turn % uint64(g.n))
				copy(out[g.off:], a.msg[g.off+k*g.size:g.off+g.n*g.size])
				copy(out[g.off+(g.n-k)*g.size:], a.msg[g.off:g.off+k*g.size])
			}
		}
	} else {
		t := s.nx
		if t == nil || !underSuffix(key, s.svcSuffix) {
			return 0, fq, 0, false
		}
		a = &t.packedAnswer
		delta := len(key) - t.qlen
		n = len(t.msg) + delta
		if n > limit {
			return 0, fq, 0, false
		}
		copy(out, t.msg[:headerLen])
		tail := headerLen + t.qlen + 4
		copy(out[fq.qend:], t.msg[tail:])
		for _, ptr := range t.pointers {
			v := binary.BigEndian.Uint16(t.msg[ptr:])
			binary.BigEndian.PutUint16(out[ptr+delta:], v+uint16(delta))
		}
		if a.serial > 0 {
			binary.BigEndian.PutUint32(out[a.serial+delta:], s.index.generation.Load())
		}
	}
	copy(out[:2], q[:2])
	out[2] |= q[2] & 0x01 // RD
	out[3] |= q[3] & 0x10 // CD
	copy(out[headerLen:fq.qend], q[headerLen:fq.qend])
	if fq.edns {
		o := out[n : n+optLen]
		o[0] = 0
		binary.BigEndian.PutUint16(o[1:], dns.TypeOPT)
		binary.BigEndian.PutUint16(o[3:], uint16(s.cfg.MaxUDPSize))
		o[5], o[6], o[7], o[8] = 0, 0, 0, 0
		if fq.do {
			o[7] = 0x80
		}
		o[9], o[10] = 0, 0
		binary.BigEndian.PutUint16(out[10:], binary.BigEndian.Uint16(out[10:])+1)
		n += optLen
	}
	return n, fq, a.rcode, true
}

// underSuffix says whether the wire-format name key is strictly below the
// wire-format name suffix: it ends with it, on a label boundary.
func underSuffix(key []byte, suffix string) bool {
	start := len(key) - len(suffix)
	if start <= 0 || string(key[start:]) != suffix {
		return false
	}
	off := 0
	for off < start {
		off += 1 + int(key[off])
	}
	return off == start
}

// udpReader answers the queries of one UDP socket; each reader has its own
// buffers.
type udpReader struct {
	s      *Server
	conn   net.PacketConn
	udp    *net.UDPConn // conn, when it is one: reads and writes without allocating
	in     []byte
	out    []byte
	sample uint32
}

func (s *Server) newUDPReader(pc net.PacketConn) *udpReader {
	r := &udpReader{s: s, conn: pc, in: make([]byte, dns.MaxMsgSize), out: make([]byte, s.cfg.MaxUDPSize)}
	r.udp, _ = pc.(*net.UDPConn)
	return r
}

// serve answers queries until the socket is closed.
func (r *udpReader) serve() error {
	for {
		var n int
		var from netip.AddrPort
		var addr net.Addr
		var err error
		if r.udp != nil {
			n, from, err = r.udp.ReadFromUDPAddrPort(r.in)
		} else {
			n, addr, err = r.conn.ReadFrom(r.in)
		}
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				return err
			}
			r.s.logger.V(4).Info("Reading a UDP query failed", "err", err)
			continue
		}
		r.handle(r.in[:n], from, addr)
	}
}

// handle answers one datagram, through the fast path when it can.
func (r *udpReader) handle(q []byte, from netip.AddrPort, addr net.Addr) {
	s := r.s
	r.sample++
	timed := r.sample%durationSampling == 0
	var start time.Time
	if timed {
		start = time.Now()
	}
	n, fq, rcode, ok := s.fastAnswer(q, r.out, false)
	if !ok {
		if addr == nil {
			addr = net.UDPAddrFromAddrPort(from)
		}
		s.serveSlow(q, &udpWriter{r: r, to: from, addr: addr})
		return
	}
	s.metrics.count(int(fq.qtype), rcode)
	r.write(r.out[:n], from, addr)
	if timed {
		s.metrics.duration.Observe(time.Since(start).Seconds())
	}
}

func (r *udpReader) write(b []byte, to netip.AddrPort, addr net.Addr) {
	var err error
	if r.udp != nil {
		_, err = r.udp.WriteToUDPAddrPort(b, to)
	} else {
		_, err = r.conn.WriteTo(b, addr)
	}
	if err != nil {
		r.s.logger.V(4).Info("Could not write a DNS answer", "remote", to, "err", err)
	}
}

// serveSlow answers a query the fast path does not take, as the miekg/dns
// server would: its header check, parsing, then ServeDNS.
func (s *Server) serveSlow(q []byte, w dns.ResponseWriter) {
	if len(q) < headerLen {
		// No header to answer to.
		s.metrics.malformed.Inc()
		return
	}
	req := new(dns.Msg)
	err := req.Unpack(q)
	action := acceptQuery(header(q))
	switch action {
	case dns.MsgIgnore:
		return
	case dns.MsgAccept:
		if err == nil {
			s.ServeDNS(w, req)
			return
		}
		s.metrics.malformed.Inc()
	default:
		// Turned away on its header: miekg/dns does not parse the rest.
		req.Question = nil
	}
	opcode := req.Opcode
	req.SetRcodeFormatError(req)
	req.Zero = false
	if action == dns.MsgRejectNotImplemented {
		req.Opcode = opcode
		req.Rcode = dns.RcodeNotImplemented
	}
	req.Answer, req.Ns, req.Extra = nil, nil, nil
	_ = w.WriteMsg(req)
}

// header is the header of the message b, at least headerLen bytes.
func header(b []byte) dns.Header {
	return dns.Header{
		Id:      binary.BigEndian.Uint16(b[0:]),
		Bits:    binary.BigEndian.Uint16(b[2:]),
		Qdcount: binary.BigEndian.Uint16(b[4:]),
		Ancount: binary.BigEndian.Uint16(b[6:]),
		Nscount: binary.BigEndian.Uint16(b[8:]),
		Arcount: binary.BigEndian.Uint16(b[10:]),
	}
}

// udpWriter is the ResponseWriter of the full path over UDP.
type udpWriter struct {
	noTsig
	r    *udpReader
	to   netip.AddrPort
	addr net.Addr
}

func (w *udpWriter) LocalAddr() net.Addr         { return w.r.conn.LocalAddr() }
func (w *udpWriter) RemoteAddr() net.Addr        { return w.addr }
func (w *udpWriter) WriteMsg(m *dns.Msg) error   { return writeMsg(w, m) }
func (w *udpWriter) Write(b []byte) (int, error) { w.r.write(b, w.to, w.addr); return len(b), nil }
func (w *udpWriter) Close() error                { return nil }

// noTsig is what the server's ResponseWriters share: no TSIG, and nothing
// to hijack.
type noTsig struct{}

func (noTsig) TsigStatus() error   { return nil }
func (noTsig) TsigTimersOnly(bool) {}
func (noTsig) Hijack()             {}

// writeMsg packs m and writes it with w.
func writeMsg(w io.Writer, m *dns.Msg) error {
	b, err := m.Pack()
	if err != nil {
		return err
	}
	_, err = w.Write(b)
	return err
}
