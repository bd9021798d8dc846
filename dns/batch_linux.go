package dns

import (
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"syscall"
	"time"
	"unsafe"

	"github.com/miekg/dns"
	"golang.org/x/sys/unix"
)

// On Linux a UDP socket is read and written in batches: one recvmmsg takes
// every query waiting (up to batchSize), one sendmmsg sends the fast path's
// answers to all of them. Under load that is two system calls for many
// queries instead of two per query, which is most of what a query costs
// once its answer is a copy.

const (
	batchSize = 16
	// batchQueryLen is the largest query a batch slot holds; a longer
	// datagram arrives cut and is answered FORMERR. Queries are a few dozen
	// bytes.
	batchQueryLen = 4096
	// receiveBuffer is the socket's receive buffer: queries wait there
	// while a batch is answered, and while the process is not scheduled,
	// which the default (about 200 KiB, some 200 queries) does not cover
	// under load.
	receiveBuffer = 4 << 20
	// ctlWords is the size, in 8-byte words, of a slot's control
	// messages: one IPV6_PKTINFO or IP_PKTINFO.
	ctlWords = 8
)

// mmsghdr is struct mmsghdr: a message header and the length received.
type mmsghdr struct {
	hdr unix.Msghdr
	len uint32
	_   [4]byte
}

// batchReader answers the queries of one UDP socket in batches.
type batchReader struct {
	*udpReader
	rc syscall.RawConn

	in      [batchSize]mmsghdr
	inIov   [batchSize]unix.Iovec
	names   [batchSize][unix.SizeofSockaddrInet6]byte
	queries [batchSize][batchQueryLen]byte
	n       int
	rerr    error
	// pktinfo says that each query comes with the address it was sent to
	// (inCtl), which its answer is sent from (outCtl): on a socket bound to
	// a wildcard address, the kernel would otherwise pick the source, and
	// an address other than the one asked (another address of the same
	// interface, as IPv6 interfaces have several) is an answer the client
	// drops.
	pktinfo bool
	inCtl   [batchSize][ctlWords]uint64
	outCtl  [batchSize][ctlWords]uint64

	out     [batchSize]mmsghdr
	outIov  [batchSize]unix.Iovec
	answers [][]byte // batchSize slots of MaxUDPSize bytes
	pending int
	sent    int

	// read and write are the RawConn callbacks, made once: a closure
	// made per call would be an allocation per batch.
	read, write func(fd uintptr) bool
}

// newBatchReader returns a batch reader for r's socket, or nil when it is
// not a UDP socket.
func newBatchReader(r *udpReader) *batchReader {
	if r.udp == nil {
		return nil
	}
	rc, err := r.udp.SyscallConn()
	if err != nil {
		return nil
	}
	b := &batchReader{udpReader: r, rc: rc, answers: make([][]byte, batchSize)}
	_ = rc.Control(func(fd uintptr) {
		// Beyond net.core.rmem_max with CAP_NET_ADMIN, up to it without.
		if unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, receiveBuffer) != nil {
			_ = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF, receiveBuffer)
		}
		if a, ok := r.udp.LocalAddr().(*net.UDPAddr); !ok || !a.IP.IsUnspecified() {
			return // bound to one address: answers come from it
		}
		// An IPv6 socket reports IPv4 queries' addresses (v4-mapped) in
		// IPV6_PKTINFO too.
		sa, err := unix.Getsockname(int(fd))
		switch sa.(type) {
		case *unix.SockaddrInet6:
			err = unix.SetsockoptInt(int(fd), unix.IPPROTO_IPV6, unix.IPV6_RECVPKTINFO, 1)
		case *unix.SockaddrInet4:
			err = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_PKTINFO, 1)
		default:
			return
		}
		b.pktinfo = err == nil
	})
	for i := range batchSize {
		if b.pktinfo {
			b.in[i].hdr.Control = (*byte)(unsafe.Pointer(&b.inCtl[i][0]))
		}
		b.inIov[i].Base = &b.queries[i][0]
		b.in[i].hdr.Name = &b.names[i][0]
		b.in[i].hdr.Iov = &b.inIov[i]
		b.in[i].hdr.Iovlen = 1
		b.answers[i] = make([]byte, r.s.cfg.MaxUDPSize)
		b.outIov[i].Base = &b.answers[i][0]
		b.out[i].hdr.Iov = &b.outIov[i]
		b.out[i].hdr.Iovlen = 1
	}
	b.read = b.recv
	b.write = b.send
	return b
}

// recv is the read callback: one recvmmsg. It says false to wait until the
// socket is readable.
func (b *batchReader) recv(fd uintptr) bool {
	for i := range batchSize {
		b.in[i].hdr.Namelen = unix.SizeofSockaddrInet6
		b.in[i].hdr.Flags = 0
		if b.pktinfo {
			b.in[i].hdr.SetControllen(ctlWords * 8)
		}
		b.inIov[i].SetLen(batchQueryLen)
	}
	n, _, e := unix.Syscall6(unix.SYS_RECVMMSG, fd, uintptr(unsafe.Pointer(&b.in[0])), batchSize, 0, 0, 0)
	switch e {
	case 0:
		b.n, b.rerr = int(n), nil
	case unix.EAGAIN:
		return false
	case unix.EINTR:
		b.n, b.rerr = 0, nil
	default:
		b.n, b.rerr = 0, e
	}
	return true
}

// send is the write callback: sendmmsg until every pending answer is sent.
// It says false to wait until the socket is writable.
func (b *batchReader) send(fd uintptr) bool {
	for b.sent < b.pending {
		n, _, e := unix.Syscall6(unix.SYS_SENDMMSG, fd, uintptr(unsafe.Pointer(&b.out[b.sent])), uintptr(b.pending-b.sent), 0, 0, 0)
		switch e {
		case 0:
			b.sent += int(n)
		case unix.EAGAIN:
			return false
		case unix.EINTR:
		default:
			// The first pending answer could not be sent (its client is
			// gone, say): skip it.
			b.s.logger.V(4).Info("Could not write a DNS answer", "err", e)
			b.sent++
		}
	}
	return true
}

// serve answers queries until the socket is closed.
func (b *batchReader) serve() error {
	for {
		if err := b.rc.Read(b.read); err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			return err
		}
		if b.rerr != nil {
			b.s.logger.V(4).Info("Reading UDP queries failed", "err", b.rerr)
			continue
		}
		b.pending, b.sent = 0, 0
		for i := range b.n {
			b.answer(i)
		}
		if b.pending > 0 {
			if err := b.rc.Write(b.write); err != nil {
				if errors.Is(err, net.ErrClosed) {
					return nil
				}
				return err
			}
		}
	}
}

// answer answers the i-th query of the batch: the fast path's answer joins
// the batch to send, anything else is answered at once by the full path.
func (b *batchReader) answer(i int) {
	s := b.s
	m := &b.in[i]
	from := sockaddrAddrPort(b.names[i][:m.hdr.Namelen])
	q := b.queries[i][:min(int(m.len), batchQueryLen)]
	b.sample++
	timed := b.sample%durationSampling == 0
	var start time.Time
	if timed {
		start = time.Now()
	}
	if m.hdr.Flags&unix.MSG_TRUNC == 0 {
		if n, fq, rcode, ok := s.fastAnswer(q, b.answers[i], false); ok {
			b.queue(i, n)
			s.metrics.count(int(fq.qtype), rcode)
			if timed {
				s.metrics.duration.Observe(time.Since(start).Seconds())
			}
			return
		}
	}
	s.serveSlow(q, &batchWriter{udpWriter: udpWriter{r: b.udpReader, to: from, addr: net.UDPAddrFromAddrPort(from)}, b: b, i: i})
}

// queue adds the answer to the i-th query, the first n bytes of its answer
// slot, to the batch to send: to the address the query came from (with its
// zone, for a link-local one), from the address it was sent to.
func (b *batchReader) queue(i, n int) {
	m := &b.in[i]
	o := &b.out[b.pending]
	o.hdr.Name = m.hdr.Name
	o.hdr.Namelen = m.hdr.Namelen
	o.hdr.Iov = &b.outIov[b.pending]
	b.outIov[b.pending].Base = &b.answers[i][0]
	b.outIov[b.pending].SetLen(n)
	o.hdr.Control = nil
	o.hdr.SetControllen(0)
	if b.pktinfo {
		if l := sourceControl(b.inCtl[i][:], int(m.hdr.Controllen), &b.outCtl[i]); l > 0 {
			o.hdr.Control = (*byte)(unsafe.Pointer(&b.outCtl[i][0]))
			o.hdr.SetControllen(l)
		}
	}
	b.pending++
}

// batchWriter is the full path's ResponseWriter in a batch: its answer
// joins the batch, as the fast path's do.
type batchWriter struct {
	udpWriter
	b *batchReader
	i int
}

func (w *batchWriter) WriteMsg(m *dns.Msg) error { return writeMsg(w, m) }

func (w *batchWriter) Write(p []byte) (int, error) {
	if len(p) > len(w.b.answers[w.i]) {
		return w.udpWriter.Write(p)
	}
	w.b.queue(w.i, copy(w.b.answers[w.i], p))
	return len(p), nil
}

// sourceControl reads the IPV6_PKTINFO or IP_PKTINFO message among the
// first n bytes of the control messages in, and writes to out the message
// that sends an answer from the address it names. It returns the length
// written, 0 when there is nothing to write.
func sourceControl(in []uint64, n int, out *[ctlWords]uint64) int {
	buf := unsafe.Slice((*byte)(unsafe.Pointer(&in[0])), len(in)*8)[:min(n, len(in)*8)]
	hdrLen := unix.CmsgLen(0)
	for len(buf) >= hdrLen {
		h := (*unix.Cmsghdr)(unsafe.Pointer(&buf[0]))
		l := int(h.Len)
		if l < hdrLen || l > len(buf) {
			return 0
		}
		data := buf[hdrLen:l]
		switch {
		case h.Level == unix.IPPROTO_IPV6 && h.Type == unix.IPV6_PKTINFO && len(data) >= unix.SizeofInet6Pktinfo:
			info := (*unix.Inet6Pktinfo)(unsafe.Pointer(&data[0]))
			if info.Addr[0] == 0xff {
				return 0 // multicast: not an address to answer from
			}
			*(*unix.Inet6Pktinfo)(putControl(out, unix.IPPROTO_IPV6, unix.IPV6_PKTINFO, unix.SizeofInet6Pktinfo)) = unix.Inet6Pktinfo{Addr: info.Addr}
			return unix.CmsgSpace(unix.SizeofInet6Pktinfo)
		case h.Level == unix.IPPROTO_IP && h.Type == unix.IP_PKTINFO && len(data) >= unix.SizeofInet4Pktinfo:
			// Spec_dst is the local address the query reached: for one
			// sent to a broadcast address, the interface's.
			info := (*unix.Inet4Pktinfo)(unsafe.Pointer(&data[0]))
			*(*unix.Inet4Pktinfo)(putControl(out, unix.IPPROTO_IP, unix.IP_PKTINFO, unix.SizeofInet4Pktinfo)) = unix.Inet4Pktinfo{Spec_dst: info.Spec_dst}
			return unix.CmsgSpace(unix.SizeofInet4Pktinfo)
		}
		buf = buf[min(unix.CmsgSpace(l-hdrLen), len(buf)):]
	}
	return 0
}

// putControl writes to out the header of one control message of level and
// typ with dataLen bytes of data, and returns where the data goes.
func putControl(out *[ctlWords]uint64, level, typ int32, dataLen int) unsafe.Pointer {
	*out = [ctlWords]uint64{}
	h := (*unix.Cmsghdr)(unsafe.Pointer(&out[0]))
	h.Level, h.Type = level, typ
	h.SetLen(unix.CmsgLen(dataLen))
	return unsafe.Add(unsafe.Pointer(&out[0]), unix.CmsgLen(0))
}

// sockaddrAddrPort reads a struct sockaddr_in or sockaddr_in6.
func sockaddrAddrPort(sa []byte) netip.AddrPort {
	if len(sa) < 8 {
		return netip.AddrPort{}
	}
	port := binary.BigEndian.Uint16(sa[2:])
	switch *(*uint16)(unsafe.Pointer(&sa[0])) {
	case unix.AF_INET:
		return netip.AddrPortFrom(netip.AddrFrom4([4]byte(sa[4:8])), port)
	case unix.AF_INET6:
		if len(sa) < unix.SizeofSockaddrInet6 {
			return netip.AddrPort{}
		}
		return netip.AddrPortFrom(netip.AddrFrom16([16]byte(sa[8:24])), port)
	}
	return netip.AddrPort{}
}

// soReusePort is SO_REUSEPORT, for ListenUDP.
const soReusePort = unix.SO_REUSEPORT
