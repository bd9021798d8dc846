package verify

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"strings"
	"time"
)

// A TCP connection needs packets both ways; a datagram goes one way. When
// a connection to a probe fails, the datagrams the check sent it (mcsd probe
// check --datagrams) and the probe logged (mcsd probe serve --datagrams)
// tell whether the way there or the way back is broken: what kubectl mcs
// diagnose needs to name the missing route.

// Datagram is one datagram a probe received, as it logs it: a JSON object
// a line.
type Datagram struct {
	// From is the sender's address as the probe sees it: a pod's, or its
	// node's where the sender's cluster masquerades.
	From    string `json:"from"`
	Payload string `json:"payload"`
}

// ServeDatagrams writes a Datagram line to w for each datagram conn
// receives, until ctx ends.
func ServeDatagrams(ctx context.Context, conn net.PacketConn, w io.Writer) error {
	go func() {
		<-ctx.Done()
		conn.Close()
	}()
	enc := json.NewEncoder(w)
	buf := make([]byte, 512)
	for {
		n, from, err := conn.ReadFrom(buf)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		if err := enc.Encode(Datagram{From: from.String(), Payload: string(buf[:n])}); err != nil {
			return err
		}
	}
}

// SendDatagrams sends payload to each target (host:port) over UDP, at once
// and then every interval until ctx ends. Errors are dropped: what arrived
// is for the receiver to say.
func SendDatagrams(ctx context.Context, targets []string, payload string, interval time.Duration) {
	var conns []net.Conn
	for _, t := range targets {
		var d net.Dialer
		if c, err := d.DialContext(ctx, "udp", t); err == nil {
			defer c.Close()
			conns = append(conns, c)
		}
	}
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		for _, c := range conns {
			_, _ = c.Write([]byte(payload))
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// ParseDatagrams reads the datagrams a probe logged; other lines are
// ignored.
func ParseDatagrams(r io.Reader) ([]Datagram, error) {
	var out []Datagram
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		var d Datagram
		if !strings.HasPrefix(line, "{") || json.Unmarshal([]byte(line), &d) != nil || d.From == "" {
			continue
		}
		out = append(out, d)
	}
	return out, sc.Err()
}
