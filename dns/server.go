package dns

import (
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"runtime/debug"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/miekg/dns"
	"k8s.io/klog/v2"
)

// Server answers DNS queries for the clusterset zone from an Index, over UDP
// and TCP.
type Server struct {
	cfg     Config
	index   *Index
	zone    *zone
	metrics *metrics
	logger  klog.Logger
	// rotation turns the order of multi-address answers between answers.
	rotation atomic.Uint64
	serving  atomic.Bool
	// nx is the fast path's NXDOMAIN answer (nil: the full path gives it);
	// svcSuffix is svc.<zone> in wire format, the names it answers for.
	nx        *nxTemplate
	svcSuffix string
}

// New returns a Server for cfg. It does not listen yet: see Run and Serve.
func New(cfg Config) (*Server, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	m, err := newMetrics(cfg.Registerer, cfg.Index)
	if err != nil {
		return nil, err
	}
	logger := cfg.Logger.WithName("dns")
	s := &Server{
		cfg:   cfg,
		index: cfg.Index,
		zone: &zone{
			index:        cfg.Index,
			names:        newZoneNames(cfg.Zone, cfg.NSName, cfg.reverseZones()),
			ttl:          uint32(cfg.TTL / time.Second),
			nsAddresses:  cfg.NSAddresses,
			localCluster: cfg.LocalCluster,
			maxUDPSize:   cfg.MaxUDPSize,
			logger:       logger,
		},
		metrics: m,
		logger:  logger,
	}
	s.svcSuffix = wireName("svc." + s.zone.names.origin)
	s.nx = s.newNXTemplate()
	// Pack the answers of what the Index holds, and from now on of every
	// service it publishes.
	s.index.attach(s.zone)
	return s, nil
}

// Ready says whether the server answers queries from a synced Index on both
// of its listeners; wire it into the daemon's readiness check.
func (s *Server) Ready() bool { return s.serving.Load() && s.index.Synced() }

// Run listens on Config.Listen over UDP and TCP and serves until ctx is done.
// It opens one UDP socket per GOMAXPROCS, bound with SO_REUSEPORT, so that
// the kernel spreads queries over them.
func (s *Server) Run(ctx context.Context) error {
	pcs, err := ListenUDP(ctx, s.cfg.Listen)
	if err != nil {
		return fmt.Errorf("dns: listening on UDP %s: %w", s.cfg.Listen, err)
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", pcs[0].LocalAddr().String())
	if err != nil {
		for _, pc := range pcs {
			pc.Close()
		}
		return fmt.Errorf("dns: listening on TCP %s: %w", s.cfg.Listen, err)
	}
	return s.serve(ctx, pcs, ln)
}

// ListenUDP opens runtime.GOMAXPROCS(0) UDP sockets on addr with
// SO_REUSEPORT (on Linux; one socket elsewhere), for ServeUDP.
func ListenUDP(ctx context.Context, addr string) ([]net.PacketConn, error) {
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		if err := c.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, soReusePort, 1)
		}); err != nil {
			return err
		}
		return serr
	}}
	if soReusePort == 0 {
		lc.Control = nil
	}
	first, err := lc.ListenPacket(ctx, "udp", addr)
	if err != nil {
		return nil, err
	}
	pcs := []net.PacketConn{first}
	if soReusePort == 0 {
		return pcs, nil
	}
	// The other sockets bind the port the first one got.
	bound := first.LocalAddr().String()
	for len(pcs) < runtime.GOMAXPROCS(0) {
		pc, err := lc.ListenPacket(ctx, "udp", bound)
		if err != nil {
			for _, pc := range pcs {
				pc.Close()
			}
			return nil, err
		}
		pcs = append(pcs, pc)
	}
	return pcs, nil
}

// Serve answers queries arriving on pc (UDP) and ln (TCP) until ctx is done
// or either fails, then closes both. GOMAXPROCS goroutines read pc.
func (s *Server) Serve(ctx context.Context, pc net.PacketConn, ln net.Listener) error {
	return s.serve(ctx, []net.PacketConn{pc}, ln)
}

// ServeUDP is Serve with several UDP sockets, such as ListenUDP's.
func (s *Server) ServeUDP(ctx context.Context, pcs []net.PacketConn, ln net.Listener) error {
	return s.serve(ctx, pcs, ln)
}

func (s *Server) serve(ctx context.Context, pcs []net.PacketConn, ln net.Listener) error {
	readers := 1
	if len(pcs) == 1 {
		readers = runtime.GOMAXPROCS(0)
	}
	running := 1 + readers*len(pcs)
	errc := make(chan error, running)
	// The sockets are bound: queries are answered from here on (the kernel
	// queues them until a reader takes them), so the server is serving
	// before its first reader can answer one.
	s.serving.Store(true)
	tcp := newTCPListener(s, ln)
	go func() { errc <- tcp.serve() }()
	for _, pc := range pcs {
		for range readers {
			r := s.newUDPReader(pc)
			if b := newBatchReader(r); b != nil {
				go func() { errc <- b.serve() }()
			} else {
				go func() { errc <- r.serve() }()
			}
		}
	}
	s.logger.Info("Serving DNS", "zone", s.cfg.Zone, "udp", pcs[0].LocalAddr(), "udpSockets", len(pcs), "tcp", ln.Addr())

	var err error
	select {
	case err = <-errc:
		running--
		if err == nil {
			err = errors.New("stopped unexpectedly")
		}
		err = fmt.Errorf("dns: serving: %w", err)
	case <-ctx.Done():
	}

	s.serving.Store(false)
	// Closing the sockets ends the readers and the TCP connections.
	for _, pc := range pcs {
		_ = pc.Close()
	}
	tcp.close()
	for ; running > 0; running-- {
		<-errc
	}
	return err
}

// acceptQuery is miekg/dns's default check of a message header, without
// NOTIFY: this server is nobody's secondary.
func acceptQuery(dh dns.Header) dns.MsgAcceptAction {
	if a := dns.DefaultMsgAcceptFunc(dh); a != dns.MsgAccept {
		return a
	}
	if opcode := int(dh.Bits>>11) & 0xF; opcode != dns.OpcodeQuery {
		return dns.MsgRejectNotImplemented
	}
	return dns.MsgAccept
}

// ServeDNS answers one query that miekg/dns parsed: over TCP, and over UDP
// when the fast path cannot take it. A panic while answering is logged and
// answered SERVFAIL; it never ends the server.
func (s *Server) ServeDNS(w dns.ResponseWriter, r *dns.Msg) {
	timed := s.metrics.sample()
	var start time.Time
	if timed {
		start = time.Now()
	}
	qtype := -1
	if len(r.Question) > 0 {
		qtype = int(r.Question[0].Qtype)
	}
	counted := false
	defer func() {
		if p := recover(); p != nil {
			s.metrics.panics.Inc()
			s.logger.Error(fmt.Errorf("panic: %v", p), "Answering a DNS query panicked; answering SERVFAIL", "question", r.Question, "stack", string(debug.Stack()))
			if !counted {
				s.metrics.count(qtype, dns.RcodeServerFailure)
			}
			m := new(dns.Msg)
			m.SetRcode(r, dns.RcodeServerFailure)
			func() {
				// The writer itself may be what panicked.
				defer func() { _ = recover() }()
				_ = w.WriteMsg(m)
			}()
		}
		if timed {
			s.metrics.duration.Observe(time.Since(start).Seconds())
		}
	}()
	m := s.reply(r, isUDP(w))
	// Counted before it is sent: whoever reads the answer sees it counted.
	s.metrics.count(qtype, m.Rcode)
	counted = true
	b, err := s.pack(m, r)
	if err == nil {
		_, err = w.Write(b)
	}
	if err != nil {
		s.logger.V(4).Info("Could not write a DNS answer", "remote", w.RemoteAddr(), "err", err)
	}
}

func isUDP(w dns.ResponseWriter) bool {
	_, ok := w.RemoteAddr().(*net.UDPAddr)
	return ok
}

// reply is the whole answer to r, sized for the transport. Its question and
// the owner names of its records are in lower case, as the Index's names
// are; pack puts the question back as it was asked.
func (s *Server) reply(r *dns.Msg, udp bool) *dns.Msg {
	m := new(dns.Msg)
	m.SetReply(r)
	if len(r.Question) != 1 {
		m.Rcode = dns.RcodeFormatError
		return m
	}
	m.Question[0].Name = strings.ToLower(m.Question[0].Name)
	var ropt *dns.OPT
	for _, rr := range r.Extra {
		if opt, ok := rr.(*dns.OPT); ok {
			if ropt != nil {
				// More than one OPT record (RFC 6891 section 6.1.1).
				m.Rcode = dns.RcodeFormatError
				return m
			}
			ropt = opt
		}
	}
	size := dns.MinMsgSize
	var opt *dns.OPT
	if ropt != nil {
		opt = &dns.OPT{Hdr: dns.RR_Header{Name: ".", Rrtype: dns.TypeOPT}}
		opt.SetUDPSize(uint16(s.cfg.MaxUDPSize))
		opt.SetDo(ropt.Do())
		if ropt.Version() != 0 {
			m.Extra = append(m.Extra, opt)
			m.Rcode = dns.RcodeBadVers
			return m
		}
		size = max(int(ropt.UDPSize()), dns.MinMsgSize)
	}
	s.resolve(m, m.Question[0], s.nextTurn)
	if opt != nil {
		m.Extra = append(m.Extra, opt)
	}
	limit := dns.MaxMsgSize
	if udp {
		limit = min(size, s.cfg.MaxUDPSize)
	}
	answers, authority := len(m.Answer), len(m.Ns)
	m.Truncate(limit)
	// Truncate sets TC when it drops additional records too; a resolver
	// that sees TC retries over TCP, which glue alone is not worth. TC says
	// that the answer or authority section is incomplete (RFC 2181 section
	// 9).
	m.Truncated = len(m.Answer) < answers || len(m.Ns) < authority
	// Truncate turns compression off when the answer fits uncompressed;
	// compressed answers are smaller, so keep it on.
	m.Compress = true
	return m
}

// pack packs m, an answer of reply to r, with r's question as it was asked:
// resolvers that randomise the case of names (0x20) check it. Names of m
// that were compressed to the question take its case too.
func (s *Server) pack(m *dns.Msg, r *dns.Msg) ([]byte, error) {
	b, err := m.Pack()
	if err != nil || len(m.Question) != 1 || len(r.Question) < 1 || m.Question[0].Name == r.Question[0].Name {
		return b, err
	}
	// The lower case name has the wire length of the asked one.
	if _, err := dns.PackDomainName(r.Question[0].Name, b, headerLen, nil, false); err != nil {
		return nil, err
	}
	return b, nil
}

// nextTurn gives the position of the next multi-address answer.
func (s *Server) nextTurn() uint64 { return s.rotation.Add(1) }

// resolve fills m with the answer to q.
func (s *Server) resolve(m *dns.Msg, q dns.Question, turn func() uint64) {
	switch {
	case q.Qclass != dns.ClassINET && q.Qclass != dns.ClassANY:
		// QCLASS ANY (RFC 1035 section 3.2.5) is answered with the only
		// class there is, IN.
		m.Rcode = dns.RcodeRefused
		return
	case q.Qtype == dns.TypeOPT:
		m.Rcode = dns.RcodeFormatError
		return
	case q.Qtype == dns.TypeAXFR || q.Qtype == dns.TypeIXFR:
		// No zone transfers: the zone changes with every endpoint.
		m.Rcode = dns.RcodeRefused
		return
	}
	qn := s.zone.names.parse(strings.ToLower(q.Name))
	if qn.kind == kindOutside {
		m.Rcode = dns.RcodeRefused
		return
	}
	if !s.index.Synced() {
		m.Rcode = dns.RcodeServerFailure
		return
	}
	s.zone.answer(m, q, qn, turn)
}
