package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"sort"
	"time"

	"github.com/mcsd-io/mcsd/test/lib/netns"
)

// topology is a node namespace that forwards between a client pod and a
// backend pod, each a namespace on a veth of its own. The node is where the
// proxier (or kube-proxy) programs nftables.
type topology struct {
	node, client, backend *netns.NS
	all                   []*netns.NS
	stopBackend           func()
}

// Addresses of the topology: the client and backend pods and their
// node-side gateways.
const (
	clientAddr     = "100.64.1.2"
	clientGateway  = "100.64.1.1"
	backendAddr    = "100.64.2.2"
	backendGateway = "100.64.2.1"
	backendPort    = 8080
	podCIDR        = "100.64.0.0/16"
)

// nsName is a namespace name unique to this run.
func nsName(role string) string { return fmt.Sprintf("mcsdbench%d-%s", os.Getpid(), role) }

func newTopology() (_ *topology, err error) {
	t := &topology{}
	defer func() {
		if err != nil {
			t.close()
		}
	}()
	add := func(role string) (*netns.NS, error) {
		ns, err := netns.New(nsName(role))
		if err != nil {
			return nil, err
		}
		t.all = append(t.all, ns)
		return ns, nil
	}
	if t.node, err = add("node"); err != nil {
		return nil, err
	}
	for _, kv := range [][2]string{{"net.ipv4.ip_forward", "1"}, {"net.ipv4.conf.all.rp_filter", "0"}} {
		if err := t.node.Sysctl(kv[0], kv[1]); err != nil {
			return nil, err
		}
	}
	plumb := func(role, addr, gw string) (*netns.NS, error) {
		pod, err := add(role)
		if err != nil {
			return nil, err
		}
		if err := netns.Veth(t.node, "v"+role, pod, "eth0"); err != nil {
			return nil, err
		}
		if _, err := t.node.IP("addr", "add", gw+"/24", "dev", "v"+role); err != nil {
			return nil, err
		}
		if _, err := pod.IP("addr", "add", addr+"/24", "dev", "eth0"); err != nil {
			return nil, err
		}
		if _, err := pod.IP("route", "add", "default", "via", gw); err != nil {
			return nil, err
		}
		return pod, nil
	}
	if t.client, err = plumb("client", clientAddr, clientGateway); err != nil {
		return nil, err
	}
	if t.backend, err = plumb("backend", backendAddr, backendGateway); err != nil {
		return nil, err
	}
	l, err := t.backend.Listen("tcp", fmt.Sprintf(":%d", backendPort))
	if err != nil {
		return nil, err
	}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
	t.stopBackend = func() { _ = l.Close() }
	return t, nil
}

func (t *topology) close() {
	if t.stopBackend != nil {
		t.stopBackend()
	}
	for _, ns := range t.all {
		if err := ns.Delete(); err != nil {
			fmt.Fprintln(os.Stderr, "proxierbench:", err)
		}
	}
}

// latency is a distribution of TCP connect times.
type latency struct {
	p50, p90, p99 time.Duration
}

func (l latency) String() string {
	return fmt.Sprintf("p50 %.3f ms  p90 %.3f ms  p99 %.3f ms", msf(l.p50), msf(l.p90), msf(l.p99))
}

func msf(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// connectLatency opens n new TCP connections from the client pod to address
// and times each connect: SYN out, SYN-ACK back. Every connection is a new
// conntrack entry, so every SYN is a first packet that walks the nftables
// rules (the dispatch map lookup, the load-balancing rule, the DNAT).
func (t *topology) connectLatency(ctx context.Context, address string, n int) (latency, error) {
	times := make([]time.Duration, 0, n)
	err := t.client.Do(func() error {
		d := net.Dialer{Timeout: 2 * time.Second}
		for i := 0; i < n; i++ {
			start := time.Now()
			c, err := d.DialContext(ctx, "tcp", address)
			elapsed := time.Since(start)
			if err != nil {
				return fmt.Errorf("connect %d to %s: %w", i, address, err)
			}
			times = append(times, elapsed)
			// A reset instead of a FIN: no TIME_WAIT piling up on the
			// client's ports over thousands of connects.
			_ = c.(*net.TCPConn).SetLinger(0)
			_ = c.Close()
		}
		return nil
	})
	if err != nil {
		return latency{}, err
	}
	sort.Slice(times, func(i, j int) bool { return times[i] < times[j] })
	at := func(q float64) time.Duration { return times[int(q*float64(len(times)-1))] }
	return latency{p50: at(0.50), p90: at(0.90), p99: at(0.99)}, nil
}
