package dns

import (
	"context"
	"errors"
	"fmt"
	"net"
	"runtime/debug"
	"strings"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"
	"k8s.io/klog/v2"
)

// Server answers DNS queries for the clusterset zone from an Index, over UDP
// and TCP.
type Server struct {
	cfg     Config
	index   *Index
	names   zoneNames
	ttl     uint32
	metrics *metrics
	logger  klog.Logger
	// rotation turns the order of multi-address answers between answers.
	rotation atomic.Uint64
	serving  atomic.Bool
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
	return &Server{
		cfg:     cfg,
		index:   cfg.Index,
		names:   newZoneNames(cfg.Zone, cfg.NSName),
		ttl:     uint32(cfg.TTL / time.Second),
		metrics: m,
		logger:  cfg.Logger.WithName("dns"),
	}, nil
}

// Ready says whether the server answers queries from a synced Index on both
// of its listeners; wire it into the daemon's readiness check.
func (s *Server) Ready() bool { return s.serving.Load() && s.index.Synced() }

// Run listens on Config.Listen over UDP and TCP and serves until ctx is done.
func (s *Server) Run(ctx context.Context) error {
	var lc net.ListenConfig
	pc, err := lc.ListenPacket(ctx, "udp", s.cfg.Listen)
	if err != nil {
		return fmt.Errorf("dns: listening on UDP %s: %w", s.cfg.Listen, err)
	}
	ln, err := lc.Listen(ctx, "tcp", s.cfg.Listen)
	if err != nil {
		pc.Close()
		return fmt.Errorf("dns: listening on TCP %s: %w", s.cfg.Listen, err)
	}
	return s.Serve(ctx, pc, ln)
}

// Serve answers queries arriving on pc (UDP) and ln (TCP) until ctx is done
// or either fails, then closes both.
func (s *Server) Serve(ctx context.Context, pc net.PacketConn, ln net.Listener) error {
	udp := s.newListener()
	udp.PacketConn = pc
	// Read whole datagrams, whatever their size; answers are limited apart.
	udp.UDPSize = dns.MaxMsgSize
	tcp := s.newListener()
	tcp.Listener = ln

	startedc := make(chan *dns.Server, 2)
	errc := make(chan error, 2)
	for _, srv := range []*dns.Server{udp, tcp} {
		srv.NotifyStartedFunc = func() { startedc <- srv }
		go func() { errc <- srv.ActivateAndServe() }()
	}

	var started []*dns.Server
	var err error
	running := 2
wait:
	for {
		select {
		case srv := <-startedc:
			started = append(started, srv)
			if len(started) == 2 {
				s.serving.Store(true)
				s.logger.Info("Serving DNS", "zone", s.cfg.Zone, "udp", pc.LocalAddr(), "tcp", ln.Addr())
			}
		case err = <-errc:
			running--
			if err == nil {
				err = errors.New("stopped unexpectedly")
			}
			err = fmt.Errorf("dns: serving: %w", err)
			break wait
		case <-ctx.Done():
			break wait
		}
	}

	s.serving.Store(false)
	stopCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, srv := range started {
		_ = srv.ShutdownContext(stopCtx)
	}
	// Closing the sockets also ends a serve loop that had not started.
	_ = pc.Close()
	_ = ln.Close()
	for ; running > 0; running-- {
		<-errc
	}
	return err
}

func (s *Server) newListener() *dns.Server {
	return &dns.Server{
		Handler:        s,
		MsgAcceptFunc:  acceptQuery,
		MsgInvalidFunc: func([]byte, error) { s.metrics.malformed.Inc() },
	}
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

// ServeDNS answers one query. A panic while answering is logged and
// answered SERVFAIL; it never ends the server.
func (s *Server) ServeDNS(w dns.ResponseWriter, r *dns.Msg) {
	start := time.Now()
	var m *dns.Msg
	defer func() {
		if p := recover(); p != nil {
			s.metrics.panics.Inc()
			s.logger.Error(fmt.Errorf("panic: %v", p), "Answering a DNS query panicked; answering SERVFAIL", "question", r.Question, "stack", string(debug.Stack()))
			m = new(dns.Msg)
			m.SetRcode(r, dns.RcodeServerFailure)
			func() {
				// The writer itself may be what panicked.
				defer func() { _ = recover() }()
				_ = w.WriteMsg(m)
			}()
		}
		qtype := "none"
		if len(r.Question) > 0 {
			qtype = qtypeLabel(r.Question[0].Qtype)
		}
		s.metrics.queries.WithLabelValues(qtype, rcodeLabel(m.Rcode)).Inc()
		s.metrics.duration.Observe(time.Since(start).Seconds())
	}()
	m = s.reply(r, isUDP(w))
	if err := w.WriteMsg(m); err != nil {
		s.logger.V(4).Info("Could not write a DNS answer", "remote", w.RemoteAddr(), "err", err)
	}
}

func isUDP(w dns.ResponseWriter) bool {
	_, ok := w.RemoteAddr().(*net.UDPAddr)
	return ok
}

// reply is the whole answer to r, sized for the transport.
func (s *Server) reply(r *dns.Msg, udp bool) *dns.Msg {
	m := new(dns.Msg)
	m.SetReply(r)
	if len(r.Question) != 1 {
		m.Rcode = dns.RcodeFormatError
		return m
	}
	size := dns.MinMsgSize
	var opt *dns.OPT
	if ropt := r.IsEdns0(); ropt != nil {
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
	s.resolve(m, r.Question[0])
	if opt != nil {
		m.Extra = append(m.Extra, opt)
	}
	if udp {
		m.Truncate(min(size, s.cfg.MaxUDPSize))
	} else {
		m.Truncate(dns.MaxMsgSize)
	}
	// Truncate turns compression off when the answer fits uncompressed;
	// compressed answers are smaller, so keep it on.
	m.Compress = true
	return m
}

// resolve fills m with the answer to q.
func (s *Server) resolve(m *dns.Msg, q dns.Question) {
	switch {
	case q.Qclass != dns.ClassINET:
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
	qn := s.names.parse(strings.ToLower(q.Name))
	if qn.kind == kindOutside {
		m.Rcode = dns.RcodeRefused
		return
	}
	if !s.index.Synced() {
		m.Rcode = dns.RcodeServerFailure
		return
	}
	s.answer(m, q, qn)
}
