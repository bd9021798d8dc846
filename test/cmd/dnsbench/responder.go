package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"

	"golang.org/x/net/ipv4"
)

// The responder is the limit beside the servers: the least a UDP DNS server
// can do per query on this machine. It reads queries in batches (recvmmsg)
// and answers each, in batches (sendmmsg), with its own question and one
// fixed A record, from one goroutine, with no lookup, no metrics and no
// allocation per query. A server's queries per CPU-second over the
// responder's is how close it comes to the cost of the socket alone.

// responderBatch is how many datagrams one system call reads or writes.
const responderBatch = 64

// startResponder runs this program's -serve-responder mode, pinned to cpu.
func startResponder(dir string, cpu int) (*server, error) {
	return startSelf("responder", dir, cpu, "-serve-responder")
}

// serveResponder is the -serve-responder mode.
func serveResponder(ctx context.Context, listen string) error {
	var lc net.ListenConfig
	c, err := lc.ListenPacket(ctx, "udp4", listen)
	if err != nil {
		return fmt.Errorf("-listen %s: %w", listen, err)
	}
	go func() { <-ctx.Done(); c.Close() }()
	pc := ipv4.NewPacketConn(c)
	in := make([]ipv4.Message, responderBatch)
	out := make([]ipv4.Message, responderBatch)
	for i := range in {
		in[i].Buffers = [][]byte{make([]byte, 4096)}
		out[i].Buffers = [][]byte{make([]byte, 0, 4096+16)}
	}
	for {
		n, err := pc.ReadBatch(in, 0)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("reading queries: %w", err)
		}
		m := 0
		for _, q := range in[:n] {
			answer, ok := fixedAnswer(out[m].Buffers[0][:0], q.Buffers[0][:q.N])
			if !ok {
				continue
			}
			out[m].Buffers[0], out[m].Addr = answer, q.Addr
			m++
		}
		for sent := 0; sent < m; {
			k, err := pc.WriteBatch(out[sent:m], 0)
			if err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return fmt.Errorf("sending answers: %w", err)
			}
			sent += k
		}
	}
}

// fixedAnswer appends to buf the answer to query: its header and question,
// flagged as an authoritative response, and one A record, 127.0.0.1 with a
// TTL of 5 s, whose owner points at the question's name. Whatever followed
// the question (an EDNS0 OPT record) is left out. ok is false for a
// datagram that is not one query.
func fixedAnswer(buf, query []byte) (answer []byte, ok bool) {
	if len(query) < 12 || query[2]&0x80 != 0 || binary.BigEndian.Uint16(query[4:]) != 1 {
		return nil, false
	}
	end := 12
	for end < len(query) && query[end] != 0 {
		if query[end]&0xC0 != 0 {
			return nil, false
		}
		end += int(query[end]) + 1
	}
	end += 1 + 4 // the root label, type and class
	if end > len(query) {
		return nil, false
	}
	buf = append(buf, query[:end]...)
	buf[2] = 0x84 | query[2]&0x01 // QR, AA, and the query's RD
	buf[3] = 0                    // RCODE NOERROR
	binary.BigEndian.PutUint16(buf[6:], 1)
	binary.BigEndian.PutUint32(buf[8:], 0) // no authority, no additional
	return append(buf,
		0xC0, 12, // the question's name
		0, 1, 0, 1, // A, IN
		0, 0, 0, 5, // TTL
		0, 4, 127, 0, 0, 1), true
}
