package realnode

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/mcsd-io/mcsd/test/lib/echo"
)

// exportedEcho exports an echo service of cluster2 (a backend on each of
// its nodes) in namespace ns and waits until cluster1's clients resolve
// it through their cluster DNS; it returns the ClusterSetIP.
func (w *world) exportedEcho(ctx context.Context, t *testing.T, ns, name string) netip.Addr {
	t.Helper()
	exporting := w.members[1]
	w.namespace(t, ns)
	w.backends(ctx, t, exporting, ns, name)
	w.services(ctx, t, exporting, ns, name, []string{name})
	w.export(ctx, t, exporting, ns, name)
	return w.awaitResolved(ctx, t, ns, name)
}

// snippetCache is how long the shipped snippet's `cache 5` lets a CoreDNS
// replica keep an answer, a negative one too: after a name first resolves,
// another replica may still answer NXDOMAIN from its cache for that long.
const snippetCache = 5 * time.Second

// awaitResolved waits until every client of cluster1 resolves a clusterset
// name through its cluster DNS, and has for longer than the cluster DNS
// caches answers (every replica has it then), and returns the address.
func (w *world) awaitResolved(ctx context.Context, t *testing.T, ns, name string) netip.Addr {
	t.Helper()
	var vip netip.Addr
	var since time.Time
	var last error
	err := wait.PollUntilContextTimeout(ctx, pollEvery, 2*time.Minute, true, func(context.Context) (bool, error) {
		for _, c := range w.members[0].clients {
			a, ok, err := viaClusterDNS(c).lookup(fqdn(ns, name))
			if err != nil || !ok || (vip.IsValid() && a != vip) {
				last = fmt.Errorf("%s: %v %v %v", c, a, ok, err)
				since = time.Time{}
				return false, nil
			}
			vip = a
		}
		if since.IsZero() {
			since = time.Now()
		}
		return time.Since(since) > snippetCache, nil
	})
	if err != nil {
		t.Fatalf("%s did not resolve steadily through the cluster DNS of %s (last: %v): %v", fqdn(ns, name), w.members[0].Name, last, err)
	}
	return vip
}

// flow is a long-lived TCP connection from a client pod through a
// ClusterSetIP to an echo backend, exercised every interval until stopped:
// each exchange writes a byte and reads the backend's identity line.
type flow struct {
	conn     net.Conn
	stop     chan struct{}
	done     chan struct{}
	mu       sync.Mutex
	err      error
	backend  echo.Identity
	exchange int
}

func openFlow(ctx context.Context, t *testing.T, c *client, vip netip.Addr) *flow {
	t.Helper()
	addr := netip.AddrPortFrom(vip, echoPort).String()
	conn, err := c.Dial(ctx, "tcp", addr)
	if err != nil {
		t.Fatalf("%s: connecting to %s: %v", c, addr, err)
	}
	r := bufio.NewReader(conn)
	first, err := r.ReadString('\n')
	if err != nil {
		t.Fatalf("%s: reading the greeting of %s: %v", c, addr, err)
	}
	id, err := echo.Parse(first)
	if err != nil {
		t.Fatal(err)
	}
	f := &flow{conn: conn, stop: make(chan struct{}), done: make(chan struct{}), backend: id}
	go func() {
		defer close(f.done)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-f.stop:
				return
			case <-tick.C:
			}
			_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
			line := ""
			_, err := conn.Write([]byte{'.'})
			if err == nil {
				line, err = r.ReadString('\n')
			}
			if err == nil {
				var got echo.Identity
				if got, err = echo.Parse(line); err == nil && got != id {
					err = fmt.Errorf("answered by %s, not %s", got, id)
				}
			}
			f.mu.Lock()
			if err != nil {
				f.err = fmt.Errorf("exchange %d over the connection to %s (%s): %w", f.exchange+1, addr, id, err)
				f.mu.Unlock()
				return
			}
			f.exchange++
			f.mu.Unlock()
		}
	}()
	t.Cleanup(func() { f.close() })
	return f
}

// close stops the flow and returns its first failure.
func (f *flow) close() error {
	select {
	case <-f.stop:
	default:
		close(f.stop)
	}
	<-f.done
	f.conn.Close()
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err
}

// exchanges says how many exchanges succeeded so far, and the failure that
// stopped them, if any.
func (f *flow) exchanges() (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.exchange, f.err
}

// probes asks something of every client of cluster1 every interval until
// stopped, counting the probes and keeping the failures.
type probes struct {
	stop     chan struct{}
	wg       sync.WaitGroup
	mu       sync.Mutex
	count    int
	failures []error
}

func (w *world) probeEvery(interval time.Duration, probe func(*client) error) *probes {
	p := &probes{stop: make(chan struct{})}
	for _, c := range w.members[0].clients {
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			tick := time.NewTicker(interval)
			defer tick.Stop()
			for {
				select {
				case <-p.stop:
					return
				case <-tick.C:
				}
				err := probe(c)
				p.mu.Lock()
				p.count++
				if err != nil {
					p.failures = append(p.failures, fmt.Errorf("%s at %s: %w", c, time.Now().Format(time.StampMilli), err))
				}
				p.mu.Unlock()
			}
		}()
	}
	return p
}

// close stops the probes and returns how many were made and which failed.
func (p *probes) close() (int, []error) {
	close(p.stop)
	p.wg.Wait()
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.count, p.failures
}

// reportFailures fails t with the first failures of a kind one by one,
// then with a summary of them all (from when to when, which clients, what
// errors): the summary is what a cut log keeps, its end.
func reportFailures(t *testing.T, kind string, failures []error) {
	t.Helper()
	const shown = 5
	for i, e := range failures {
		if i == shown {
			break
		}
		t.Error(e)
	}
	if len(failures) <= shown {
		return
	}
	byError := map[string]int{}
	for _, e := range failures {
		// "<client> at <time>: <error>": the error without the time.
		client, rest, _ := strings.Cut(e.Error(), " at ")
		_, what, _ := strings.Cut(rest, ": ")
		byError[client+": "+what]++
	}
	var kinds []string
	for what, n := range byError {
		kinds = append(kinds, fmt.Sprintf("%d× %s", n, what))
	}
	slices.Sort(kinds)
	t.Errorf("%d %s failed in all, from %v to %v:\n%s", len(failures), kind, failures[0], failures[len(failures)-1], strings.Join(kinds, "\n"))
}

// pollDNS asks every client of cluster1 for a name through its cluster DNS
// every pollEvery; a query that fails, or answers other than want, is a
// failure.
func (w *world) pollDNS(ns, name string, want netip.Addr) *probes {
	return w.probeEvery(pollEvery, func(c *client) error {
		got, ok, err := viaClusterDNS(c).lookup(fqdn(ns, name))
		if err == nil && (!ok || got != want) {
			err = fmt.Errorf("answered %v (resolved: %v), want %s", got, ok, want)
		}
		return err
	})
}

// dialEvery opens a new TCP connection from every client of cluster1
// through the ClusterSetIP every interval and reads the backend's greeting
// on it: a connection refused, timed out or closed without a greeting is a
// failure. Unlike a flow, it takes the path of new connections while the
// data plane is rewritten.
func (w *world) dialEvery(interval time.Duration, vip netip.Addr) *probes {
	addr := netip.AddrPortFrom(vip, echoPort).String()
	return w.probeEvery(interval, func(c *client) error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := c.Ask(ctx, "tcp", addr); err != nil {
			return fmt.Errorf("a new connection to %s: %w", addr, err)
		}
		return nil
	})
}

// leader says who holds a member's leader-election Lease: its node (the
// identity is <node>_<unique id>) and since when.
func leader(ctx context.Context, m *member) (pod string, acquired time.Time, err error) {
	l, err := m.Kube.CoordinationV1().Leases(mcsdNamespace).Get(ctx, "mcsd-controllers", metav1.GetOptions{})
	if err != nil {
		return "", time.Time{}, err
	}
	if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "" || l.Spec.AcquireTime == nil {
		return "", time.Time{}, fmt.Errorf("the Lease %s/%s has no holder", mcsdNamespace, l.Name)
	}
	id := *l.Spec.HolderIdentity
	if i := strings.LastIndex(id, "_"); i > 0 {
		id = id[:i]
	}
	return id, l.Spec.AcquireTime.Time, nil
}

// traffic is what a test keeps going through an exported service while it
// replaces mcsd: one long-lived connection from cluster1's first client,
// DNS queries of the name from every client and, when asked for, a new
// connection from every client every 100 ms.
type traffic struct {
	vip        netip.Addr
	flow       *flow
	dns, dials *probes
}

func (w *world) startTraffic(ctx context.Context, t *testing.T, ns, name string, vip netip.Addr, dial bool) *traffic {
	t.Helper()
	tr := &traffic{vip: vip, flow: openFlow(ctx, t, w.members[0].clients[0], vip)}
	if dial {
		tr.dials = w.dialEvery(100*time.Millisecond, vip)
	}
	tr.dns = w.pollDNS(ns, name, vip)
	return tr
}

// stop ends the traffic, logs its figures during what it lasted for and
// fails t for each failure.
func (tr *traffic) stop(t *testing.T, during string) {
	t.Helper()
	queries, dnsFailures := tr.dns.close()
	var connections int
	var dialFailures []error
	if tr.dials != nil {
		connections, dialFailures = tr.dials.close()
	}
	exchanges, err := tr.flow.exchanges()
	dialed := ""
	if tr.dials != nil {
		dialed = fmt.Sprintf("%d of %d new connections failed; ", len(dialFailures), connections)
	}
	t.Logf("figure: during %s: %d DNS queries, %d failed; %s%d exchanges over one TCP connection through %s", during, queries, len(dnsFailures), dialed, exchanges, tr.vip)
	reportFailures(t, "DNS queries", dnsFailures)
	reportFailures(t, "new connections", dialFailures)
	if err == nil {
		err = tr.flow.close()
	}
	if err != nil {
		t.Errorf("the connection through the ClusterSetIP did not survive: %v", err)
	}
}
