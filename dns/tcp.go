package dns

import (
	"bufio"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"sync"
	"time"

	"github.com/miekg/dns"
)

// DNS over TCP (RFC 7766): each connection is read query after query, each
// prefixed by its length, for as long as the client sends them; the fast
// path answers what it takes, the full path the rest, as over UDP.

const (
	// tcpIdleTimeout is how long a connection may wait for its next query
	// (miekg/dns's and CoreDNS's default).
	tcpIdleTimeout = 8 * time.Second
	// tcpReadTimeout is how long the rest of a query may take once its
	// first bytes have come.
	tcpReadTimeout = 2 * time.Second
	// tcpWriteTimeout bounds writing one answer to a client that does not
	// read.
	tcpWriteTimeout = 2 * time.Second
)

// tcpListener accepts connections and serves each in its own goroutine.
type tcpListener struct {
	s     *Server
	ln    net.Listener
	mu    sync.Mutex
	conns map[net.Conn]struct{}
	done  bool
	wg    sync.WaitGroup
}

func newTCPListener(s *Server, ln net.Listener) *tcpListener {
	return &tcpListener{s: s, ln: ln, conns: map[net.Conn]struct{}{}}
}

// serve accepts connections until the listener is closed.
func (l *tcpListener) serve() error {
	for {
		c, err := l.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return err
		}
		l.mu.Lock()
		if l.done {
			l.mu.Unlock()
			c.Close()
			return nil
		}
		l.conns[c] = struct{}{}
		l.wg.Add(1)
		l.mu.Unlock()
		go func() {
			defer l.wg.Done()
			l.serveConn(c)
			l.mu.Lock()
			delete(l.conns, c)
			l.mu.Unlock()
			c.Close()
		}()
	}
}

// close closes the listener and every connection, and waits for their
// goroutines.
func (l *tcpListener) close() {
	l.mu.Lock()
	l.done = true
	_ = l.ln.Close()
	for c := range l.conns {
		_ = c.Close()
	}
	l.mu.Unlock()
	l.wg.Wait()
}

// serveConn answers the queries of one connection until it ends or idles.
func (l *tcpListener) serveConn(c net.Conn) {
	s := l.s
	r := bufio.NewReaderSize(c, 4096)
	var q []byte
	out := make([]byte, 2+s.cfg.MaxUDPSize)
	w := &tcpWriter{c: c}
	var sample uint32
	for {
		_ = c.SetReadDeadline(time.Now().Add(tcpIdleTimeout))
		var lenBuf [2]byte
		if _, err := io.ReadFull(r, lenBuf[:1]); err != nil {
			return
		}
		_ = c.SetReadDeadline(time.Now().Add(tcpReadTimeout))
		if _, err := io.ReadFull(r, lenBuf[1:]); err != nil {
			return
		}
		n := int(binary.BigEndian.Uint16(lenBuf[:]))
		if cap(q) < n {
			q = make([]byte, n)
		}
		q = q[:n]
		if _, err := io.ReadFull(r, q); err != nil {
			return
		}
		sample++
		timed := sample%durationSampling == 0
		var start time.Time
		if timed {
			start = time.Now()
		}
		_ = c.SetWriteDeadline(time.Now().Add(tcpWriteTimeout))
		if k, fq, rcode, ok := s.fastAnswer(q, out[2:], true); ok {
			binary.BigEndian.PutUint16(out, uint16(k))
			s.metrics.count(int(fq.qtype), rcode)
			if _, err := c.Write(out[:2+k]); err != nil {
				return
			}
			if timed {
				s.metrics.duration.Observe(time.Since(start).Seconds())
			}
			continue
		}
		s.serveSlow(q, w)
		if w.err != nil || w.closed {
			return
		}
	}
}

// tcpWriter is the ResponseWriter of the full path over TCP.
type tcpWriter struct {
	noTsig
	c      net.Conn
	err    error
	closed bool
}

func (w *tcpWriter) LocalAddr() net.Addr       { return w.c.LocalAddr() }
func (w *tcpWriter) RemoteAddr() net.Addr      { return w.c.RemoteAddr() }
func (w *tcpWriter) WriteMsg(m *dns.Msg) error { return writeMsg(w, m) }

// Write sends b with its length before it.
func (w *tcpWriter) Write(b []byte) (int, error) {
	if len(b) > dns.MaxMsgSize {
		return 0, errors.New("dns: answer over 65535 bytes")
	}
	msg := make([]byte, 2+len(b))
	binary.BigEndian.PutUint16(msg, uint16(len(b)))
	copy(msg[2:], b)
	if _, err := w.c.Write(msg); err != nil {
		w.err = err
		return 0, err
	}
	return len(b), nil
}
func (w *tcpWriter) Close() error { w.closed = true; return nil }
