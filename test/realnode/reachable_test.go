package realnode

import (
	"context"
	"fmt"
	"net/netip"
	"strconv"
	"sync"
	"testing"
	"time"
)

// pollEvery is how often a client asks DNS for a name that does not
// resolve yet.
const pollEvery = 50 * time.Millisecond

// Resolvable means reachable on every node. 40 services of cluster2 are
// exported at once; on each node of cluster1 a client pod asks for each
// name every 50 ms and connects the moment it resolves, without a retry,
// two ways: through the cluster DNS as the pod's resolv.conf says (CoreDNS,
// the snippet, the mcsd-dns Service: whichever node's mcsd answers), and
// asking the other node's mcsd directly, so that every answer comes from a
// node that is not the client's. Every connection must be answered.
func testResolvableMeansReachableOnEveryNode(t *testing.T) {
	w := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	const ns, app, count = "reach", "reach", 40
	exporting, importing := w.members[1], w.members[0]
	w.namespace(t, ns)
	w.backends(ctx, t, exporting, ns, app)
	var names []string
	for i := range count {
		names = append(names, app+"-"+strconv.Itoa(i))
	}
	w.services(ctx, t, exporting, ns, app, names)

	type probe struct {
		r       resolver
		service string
	}
	var probes []probe
	nodes := importing.RealNodes()
	for i, c := range importing.clients {
		other := nodes[(i+1)%len(nodes)]
		for _, name := range names {
			probes = append(probes, probe{viaClusterDNS(c), name}, probe{viaMCSD(c, other.IP), name})
		}
	}
	type result struct {
		via                   string
		resolved, reached     time.Duration
		connectErr, lookupErr error
	}
	results := make([]result, len(probes))
	exported := w.export(ctx, t, exporting, ns, names...)
	var wg sync.WaitGroup
	for i, p := range probes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res := &results[i]
			res.via = p.r.via
			began := exported[p.service]
			for ctx.Err() == nil {
				vip, ok, err := p.r.lookup(fqdn(ns, p.service))
				if err != nil {
					res.lookupErr = fmt.Errorf("%s asking %s for %s: %w", p.r.c, p.r.via, p.service, err)
					return
				}
				if !ok {
					time.Sleep(pollEvery)
					continue
				}
				res.resolved = time.Since(began)
				cctx, ccancel := context.WithTimeout(ctx, 3*time.Second)
				_, err = p.r.c.ask(cctx, "tcp", netip.AddrPortFrom(vip, echoPort).String())
				ccancel()
				if err != nil {
					res.connectErr = fmt.Errorf("%s: %s resolved by %s to %s, and the connection made at once failed: %w", p.r.c, p.service, p.r.via, vip, err)
					return
				}
				res.reached = time.Since(began)
				return
			}
			res.lookupErr = fmt.Errorf("%s: %s never resolved through %s: %w", p.r.c, p.service, p.r.via, ctx.Err())
		}()
	}
	wg.Wait()

	failed := 0
	byVia := map[string][]time.Duration{}
	for _, res := range results {
		if res.lookupErr != nil {
			t.Error(res.lookupErr)
			continue
		}
		if res.connectErr != nil {
			failed++
			t.Error(res.connectErr)
			continue
		}
		kind := "through the cluster DNS"
		if res.via != "the cluster DNS" {
			kind = "answered by the other node's mcsd"
		}
		byVia[kind] = append(byVia[kind], res.reached)
	}
	t.Logf("figure: %d services exported at once, %d first connections from both nodes of %s, %d failed", count, len(probes), importing.Name, failed)
	for kind, ds := range byVia {
		t.Logf("figure: export -> reachable from a pod, %s: p50 %v, p99 %v, max %v (%d connections)", kind,
			percentile(ds, 50).Round(time.Millisecond), percentile(ds, 99).Round(time.Millisecond), percentile(ds, 100).Round(time.Millisecond), len(ds))
	}
}
