// Package echo is the tiny server every harness pod runs: it answers each TCP
// connection and each UDP datagram with one line naming the pod, so a test
// can tell which backend a connection reached. The line is
// "<pod-ip> <cluster> <pod-name>\n".
package echo

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"
)

// Identity is what a server says about itself.
type Identity struct {
	IP      string
	Cluster string
	Pod     string
}

func (id Identity) String() string { return fmt.Sprintf("%s %s %s", id.IP, id.Cluster, id.Pod) }

// Parse reads an identity line.
func Parse(line string) (Identity, error) {
	f := strings.Fields(line)
	if len(f) != 3 {
		return Identity{}, fmt.Errorf("malformed echo reply %q", line)
	}
	return Identity{IP: f[0], Cluster: f[1], Pod: f[2]}, nil
}

// Server answers on one TCP listener and one UDP socket until Close.
type Server struct {
	id   Identity
	tcp  net.Listener
	udp  net.PacketConn
	wg   sync.WaitGroup
	once sync.Once
}

// Serve starts answering on the given sockets (which may live in another
// network namespace). Either may be nil.
func Serve(id Identity, tcp net.Listener, udp net.PacketConn) *Server {
	s := &Server{id: id, tcp: tcp, udp: udp}
	reply := []byte(id.String() + "\n")
	if tcp != nil {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			for {
				c, err := tcp.Accept()
				if err != nil {
					return
				}
				// Answer at once, then hold the connection until the client
				// closes it, so tests can keep a flow open.
				go func() {
					defer c.Close()
					_, _ = c.Write(reply)
					buf := make([]byte, 512)
					for {
						n, err := c.Read(buf)
						if err != nil {
							return
						}
						if _, err := c.Write(append([]byte(nil), reply...)); err != nil || n == 0 {
							return
						}
					}
				}()
			}
		}()
	}
	if udp != nil {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			buf := make([]byte, 2048)
			for {
				_, from, err := udp.ReadFrom(buf)
				if err != nil {
					return
				}
				_, _ = udp.WriteTo(reply, from)
			}
		}()
	}
	return s
}

// Close stops both servers and waits for their loops to end.
func (s *Server) Close() {
	s.once.Do(func() {
		if s.tcp != nil {
			_ = s.tcp.Close()
		}
		if s.udp != nil {
			_ = s.udp.Close()
		}
	})
	s.wg.Wait()
}

// AskTCP reads the identity line a server sends on a new connection.
func AskTCP(ctx context.Context, c net.Conn) (Identity, error) {
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return Identity{}, fmt.Errorf("reading echo reply from %s: %w", c.RemoteAddr(), err)
	}
	return Parse(line)
}

// AskUDP sends one datagram on c (a connected UDP socket) and reads the reply,
// retrying a few times because datagrams may be lost while rules change.
func AskUDP(ctx context.Context, c net.Conn) (Identity, error) {
	buf := make([]byte, 512)
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		if ctx.Err() != nil {
			break
		}
		deadline := time.Now().Add(time.Second)
		if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
			deadline = dl
		}
		_ = c.SetDeadline(deadline)
		if _, err := c.Write([]byte("who\n")); err != nil {
			lastErr = err
			continue
		}
		n, err := c.Read(buf)
		if err != nil {
			lastErr = err
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return Identity{}, fmt.Errorf("reading UDP echo reply from %s: %w", c.RemoteAddr(), err)
		}
		return Parse(string(buf[:n]))
	}
	if lastErr == nil {
		lastErr = ctx.Err()
	}
	return Identity{}, fmt.Errorf("no UDP echo reply from %s: %w", c.RemoteAddr(), lastErr)
}
