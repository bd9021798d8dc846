package verify

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"time"
)

// Serve answers each TCP connection on ln with one line, identity (the
// probe's cluster and pod), until ctx ends: what Check expects from the
// probe it reaches.
func Serve(ctx context.Context, ln net.Listener, identity string) error {
	go func() {
		<-ctx.Done()
		ln.Close()
	}()
	reply := []byte(identity + "\n")
	for {
		conn, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		go func() {
			defer conn.Close()
			_ = conn.SetWriteDeadline(time.Now().Add(5 * time.Second))
			_, _ = conn.Write(reply)
		}()
	}
}

// Result is what one probe check found: the last attempt's, or the first
// that succeeded.
type Result struct {
	// Target is the name and port asked for.
	Target string `json:"target"`
	// Address is what the name resolved to, the first address.
	Address string `json:"address,omitempty"`
	// Resolve and Connect are the latencies of the attempt's DNS query
	// and TCP connection, in milliseconds.
	ResolveMS float64 `json:"resolveMs"`
	ConnectMS float64 `json:"connectMs"`
	// Reply is the probe's line.
	Reply string `json:"reply,omitempty"`
	// Attempts counts the tries; SinceStartMS is when the one reported
	// ended, from the start of the check.
	Attempts     int     `json:"attempts"`
	SinceStartMS float64 `json:"sinceStartMs"`
	// Error is why the last attempt failed; empty on success.
	Error string `json:"error,omitempty"`
}

// OK says whether the check passed.
func (r Result) OK() bool { return r.Error == "" }

// Check resolves and connects to each target ("name:port") through the
// resolver of the pod it runs in, again every interval until the probe
// answers with a line naming want[target] or ctx ends. Targets are
// checked at once.
func Check(ctx context.Context, targets []string, want map[string]string, interval time.Duration) []Result {
	start := time.Now()
	results := make([]Result, len(targets))
	done := make(chan struct{}, len(targets))
	for i, target := range targets {
		go func() {
			defer func() { done <- struct{}{} }()
			for {
				r := attempt(ctx, target, want[target])
				if !r.OK() && ctx.Err() != nil && results[i].Attempts > 0 {
					// Cut short by the deadline: the attempt before
					// it says more about why the target fails.
					return
				}
				r.Attempts = results[i].Attempts + 1
				r.SinceStartMS = ms(time.Since(start))
				results[i] = r
				if r.OK() {
					return
				}
				select {
				case <-ctx.Done():
					return
				case <-time.After(interval):
				}
			}
		}()
	}
	for range targets {
		<-done
	}
	return results
}

func attempt(ctx context.Context, target, want string) Result {
	r := Result{Target: target}
	host, port, err := net.SplitHostPort(target)
	if err != nil {
		r.Error = err.Error()
		return r
	}
	actx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	r.Address = host
	if _, err := netip.ParseAddr(host); err != nil {
		if strings.Contains(host, ".") {
			// Absolute: one query, not one per search domain of
			// resolv.conf.
			host = strings.TrimSuffix(host, ".") + "."
		}
		t := time.Now()
		addrs, err := net.DefaultResolver.LookupHost(actx, host)
		r.ResolveMS = ms(time.Since(t))
		if err != nil {
			r.Error = "resolve: " + err.Error()
			return r
		}
		r.Address = addrs[0]
	}
	var d net.Dialer
	t := time.Now()
	conn, err := d.DialContext(actx, "tcp", net.JoinHostPort(r.Address, port))
	r.ConnectMS = ms(time.Since(t))
	if err != nil {
		r.Error = "connect: " + err.Error()
		return r
	}
	defer conn.Close()
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	line, err := bufio.NewReader(conn).ReadString('\n')
	r.Reply = strings.TrimSpace(line)
	switch {
	case err != nil:
		r.Error = "read: " + err.Error()
	case want != "" && !strings.HasPrefix(r.Reply, want+" "):
		r.Error = fmt.Sprintf("reached %q, not the probe of %s", r.Reply, want)
	}
	return r
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// errNoResult is a check pod's log without a result for a target.
var errNoResult = errors.New("the check pod reported nothing")
