package main

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/knftables"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/mcsd-io/mcsd/mcsslice"
	"github.com/mcsd-io/mcsd/proxier"
	"github.com/mcsd-io/mcsd/proxier/netfilter"
)

// deadShape is a clusterset of the dead-cluster scenario: clusters x
// services x endpoints per (service, cluster), every cluster exporting
// every service on one TCP port, as test/scale's scenarios.
type deadShape struct{ clusters, services, endpoints int }

func (s deadShape) String() string {
	return fmt.Sprintf("%dx%dx%d", s.clusters, s.services, s.endpoints)
}

func parseDeadShapes(key, def string) ([]deadShape, error) {
	v := envOr(key, def)
	if v == "none" {
		return nil, nil
	}
	var out []deadShape
	for _, part := range strings.Split(v, ",") {
		var s deadShape
		f := strings.Split(strings.TrimSpace(part), "x")
		if len(f) != 3 {
			return nil, fmt.Errorf("%s=%q: want clusters x services x endpoints, such as 50x1000x10, or none", key, v)
		}
		for i, p := range []*int{&s.clusters, &s.services, &s.endpoints} {
			n, err := strconv.Atoi(f[i])
			if err != nil || n < 1 {
				return nil, fmt.Errorf("%s=%q: %q is not a positive number", key, v, f[i])
			}
			*p = n
		}
		if s.clusters < 2 {
			return nil, fmt.Errorf("%s=%q: a cluster must die and one remain: want 2 clusters or more", key, v)
		}
		out = append(out, s)
	}
	return out, nil
}

// deadCluster is the cluster that dies: the second, as in test/scale.
const deadCluster = 1

func deadClusterName(ci int) string {
	if ci == 0 {
		return localCluster
	}
	return fmt.Sprintf("bench-c%d", ci)
}

// deadEndpoint is endpoint e of service i in cluster ci; every one is
// distinct.
func (s deadShape) deadEndpoint(ci, i, e int) netip.Addr {
	return nth(endpointBase, (ci*s.services+i)*s.endpoints+e)
}

// deadResult is one run of the dead-cluster scenario.
type deadResult struct {
	full time.Duration
	// gone is from SetGoneClusters until the last transaction that took
	// the dead cluster's endpoints out was committed; handed is until
	// SetGoneClusters returned, having handed every slice to the proxier.
	gone, handed time.Duration
	began        time.Time
	// syncs are the transactions in between.
	syncs []txRecord
	load  string
}

// benchDeadCluster loads every shape, then lets the second cluster die as
// the liveness filter tells the node agent (proxier.Feed.SetGoneClusters),
// and prints how long until the proxier's table no longer has its
// endpoints, with what each transaction carried.
func benchDeadCluster(ctx context.Context, topo *topology, shapes []deadShape, runs int) error {
	if len(shapes) == 0 {
		return nil
	}
	fmt.Printf("\n== a dead cluster (nftables mode): proxier.Feed.SetGoneClusters until its endpoints are out of the table; MinSyncPeriod 1 s (the daemon's default) ==\n")
	results := map[deadShape][]deadResult{}
	for _, s := range shapes {
		for run := 0; run < runs; run++ {
			r, err := deadClusterOnce(ctx, topo, s)
			if err != nil {
				return fmt.Errorf("dead cluster at %s: %w", s, err)
			}
			results[s] = append(results[s], r)
			fmt.Printf("%-12s run %d: first sync %s; handed over in %s, gone after %s in %d transaction(s): %s  [load %s]\n",
				s, run+1, ms(r.full), ms(r.handed), ms(r.gone), len(r.syncs), describeTxs(r.syncs, r.began), r.load)
		}
	}
	fmt.Println()
	fmt.Println("dead cluster: median [lowest - highest] of the runs; elements: deleted / added over all transactions")
	for _, s := range shapes {
		var full, gone []time.Duration
		var loads []string
		for _, r := range results[s] {
			full, gone, loads = append(full, r.full), append(gone, r.gone), append(loads, r.load)
		}
		last := results[s][len(results[s])-1]
		var del, add, bytes int
		for _, t := range last.syncs {
			del, add, bytes = del+t.deletes, add+t.adds, bytes+t.bytes
		}
		fmt.Printf("%-12s first sync %s  gone %s  (last run: %d deleted, %d added, %d bytes of nft input; the cluster had %d)  load %s\n",
			s, spread(full), spread(gone), del, add, bytes, s.services*s.endpoints, strings.Join(loads, " "))
	}
	return nil
}

// describeTxs says, for each transaction, when it started after the
// cluster went, how long nft took, and what it carried.
func describeTxs(txs []txRecord, began time.Time) string {
	var parts []string
	for _, t := range txs {
		parts = append(parts, fmt.Sprintf("[at +%s, nft %s: -%d +%d elements, %d commands, %d bytes]",
			ms(t.start.Sub(began)), ms(t.end.Sub(t.start)), t.deletes, t.adds, t.ops, t.bytes))
	}
	return strings.Join(parts, " ")
}

func deadClusterOnce(ctx context.Context, topo *topology, s deadShape) (deadResult, error) {
	res := deadResult{load: loadAverage()}
	var nft knftables.Interface
	var counter netfilter.RuleCounter
	var ct netfilter.Conntrack
	err := topo.node.Do(func() (err error) {
		_ = proxier.CleanupLeftovers(context.Background(), proxier.ModeAuto, nil)
		if nft, err = knftables.New(knftables.IPv4Family, proxier.TableName); err != nil {
			return err
		}
		if counter, err = netfilter.NewRuleCounter(proxier.TableName); err != nil {
			return err
		}
		ct, err = netfilter.NewConntrack()
		return err
	})
	if err != nil {
		return res, err
	}
	rec := &recordingNFT{Interface: nft}
	reg := prometheus.NewRegistry()
	p, err := proxier.New(proxier.Config{
		Mode: proxier.ModeNFTables, ClusterID: localCluster, NodeName: "bench-node",
		IPFamily: v1.IPv4Protocol, NFTables: rec, Conntrack: ct, RuleCounter: counter,
		PodCIDRs: []string{podCIDR}, Registerer: reg,
	})
	if err != nil {
		return res, err
	}
	imports, slices := deadObjects(s)
	importInf := staticInformer(&mcsv1beta1.ServiceImport{}, &mcsv1beta1.ServiceImportList{Items: imports})
	sliceInf := staticInformer(&discoveryv1.EndpointSlice{}, &discoveryv1.EndpointSliceList{Items: slices})
	feed, err := proxier.NewFeed(importInf, sliceInf, p)
	if err != nil {
		return res, err
	}
	loopCtx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	wg.Add(3)
	go func() { defer wg.Done(); importInf.Run(loopCtx.Done()) }()
	go func() { defer wg.Done(); sliceInf.Run(loopCtx.Done()) }()
	go func() { defer wg.Done(); _ = topo.node.Do(func() error { p.SyncLoop(loopCtx); return nil }) }()
	if !feed.Run(loopCtx) {
		return res, ctx.Err()
	}
	if res.full, err = waitHistogram(ctx, reg, fullMetric, 1, syncWait); err != nil {
		return res, fmt.Errorf("the first sync did not succeed: %w", err)
	}

	// The dead cluster's endpoints are out once the transactions since
	// SetGoneClusters have taken as many elements out of the backends map
	// as it had endpoints (one port per service).
	stopProfile, err := startProfile("dead-cluster." + s.String())
	if err != nil {
		return res, err
	}
	defer stopProfile()
	rec.start()
	start := time.Now()
	feed.SetGoneClusters(mcsslice.NewGoneClusters(deadClusterName(deadCluster)))
	res.handed, res.began = time.Since(start), start
	deadline := time.Now().Add(syncWait)
	for {
		txs := rec.taken()
		net := 0
		for _, t := range txs {
			net += t.backendsNet
		}
		if n := len(txs); n > 0 && net <= -s.services*s.endpoints {
			res.gone = txs[n-1].end.Sub(start)
			res.syncs = txs
			break
		}
		if time.Now().After(deadline) {
			return res, fmt.Errorf("no sync after SetGoneClusters in %v", syncWait)
		}
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
	for _, t := range res.syncs {
		if t.err != nil {
			return res, fmt.Errorf("a transaction failed: %w", t.err)
		}
	}
	return res, nil
}

// deadObjects are the imports and slices of a shape.
func deadObjects(s deadShape) ([]mcsv1beta1.ServiceImport, []discoveryv1.EndpointSlice) {
	imports := make([]mcsv1beta1.ServiceImport, 0, s.services)
	slices := make([]discoveryv1.EndpointSlice, 0, s.services*s.clusters)
	for i := range s.services {
		name := fmt.Sprintf("svc-%05d", i)
		// One port, as test/scale's services have.
		si := benchImport(name, nth(vipBase, i).String())
		si.Spec.Ports = si.Spec.Ports[:1]
		imports = append(imports, *si)
		for ci := range s.clusters {
			addrs := make([]netip.Addr, s.endpoints)
			for e := range addrs {
				addrs[e] = s.deadEndpoint(ci, i, e)
			}
			slices = append(slices, *benchSlice(name, deadClusterName(ci), addrs, benchTarget))
		}
	}
	return imports, slices
}

// staticInformer is a real shared informer over a fixed list, with a watch
// that never says anything.
func staticInformer(obj runtime.Object, list runtime.Object) cache.SharedIndexInformer {
	lw := &cache.ListWatch{
		ListWithContextFunc: func(context.Context, metav1.ListOptions) (runtime.Object, error) { return list, nil },
		WatchFuncWithContext: func(context.Context, metav1.ListOptions) (watch.Interface, error) {
			return watch.NewFake(), nil
		},
	}
	return cache.NewSharedIndexInformer(listThenWatch{lw}, obj, 0, cache.Indexers{})
}

// listThenWatch tells the reflector to list, not to ask the watch for the
// initial objects (a streaming list), which the silent watch would never
// finish.
type listThenWatch struct{ *cache.ListWatch }

func (listThenWatch) IsWatchListSemanticsUnSupported() bool { return true }

// txRecord is one nftables transaction the proxier ran.
type txRecord struct {
	start, end                time.Time
	ops, bytes, adds, deletes int
	// backendsNet is the elements the backends maps gained (negative:
	// lost).
	backendsNet int
	err         error
}

// recordingNFT passes transactions to nft and, once started, records what
// each carried.
type recordingNFT struct {
	knftables.Interface
	mu        sync.Mutex
	recording bool
	txs       []txRecord
}

func (r *recordingNFT) start() {
	r.mu.Lock()
	r.recording, r.txs = true, nil
	r.mu.Unlock()
}

func (r *recordingNFT) taken() []txRecord {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]txRecord(nil), r.txs...)
}

func (r *recordingNFT) Run(ctx context.Context, tx *knftables.Transaction) error {
	r.mu.Lock()
	recording := r.recording
	r.mu.Unlock()
	if !recording {
		return r.Interface.Run(ctx, tx)
	}
	t := txRecord{ops: tx.NumOperations()}
	text := tx.String()
	t.bytes = len(text)
	for _, line := range strings.Split(text, "\n") {
		n := strings.Count(line, ", ") + 1
		backends := strings.Contains(line, " backends-")
		switch {
		case strings.HasPrefix(line, "add element "):
			t.adds += n
			if backends {
				t.backendsNet += n
			}
		case strings.HasPrefix(line, "delete element "):
			t.deletes += n
			if backends {
				t.backendsNet -= n
			}
		}
	}
	t.start = time.Now()
	t.err = r.Interface.Run(ctx, tx)
	t.end = time.Now()
	r.mu.Lock()
	r.txs = append(r.txs, t)
	r.mu.Unlock()
	return t.err
}

// startProfile starts a CPU profile of the bench's process, the proxier
// with it, when PROXIER_BENCH_PROFILE is set, to <that>.<what>.<time>; the
// function it returns stops it.
func startProfile(what string) (stop func(), err error) {
	prefix := os.Getenv("PROXIER_BENCH_PROFILE")
	if prefix == "" {
		return func() {}, nil
	}
	f, err := os.Create(fmt.Sprintf("%s.%s.%d", prefix, what, time.Now().Unix()))
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}
