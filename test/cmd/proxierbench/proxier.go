package main

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os/exec"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/knftables"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/mcsd-io/mcsd/mcsslice"
	"github.com/mcsd-io/mcsd/proxier"
	"github.com/mcsd-io/mcsd/proxier/netfilter"
)

// Clusters of the bench: half of every import's endpoints are local, half
// remote, as for a service exported by two clusters.
const (
	localCluster  = "bench-east"
	remoteCluster = "bench-west"
	benchNS       = "bench"
)

// latencyVIP is the ClusterSetIP whose endpoint is the topology's backend.
// Its import's name sorts after every "svc-N", so that in iptables mode its
// rule is the last of MCSD-SERVICES and a connect to it walks all the
// others, the worst case.
const (
	latencyVIP    = "243.63.255.1"
	latencyImport = "zz-latency"
)

var (
	vipBase      = netip.MustParseAddr("243.64.0.0")
	endpointBase = netip.MustParseAddr("100.66.0.0")
	// movedBase is where partial-sync changes move an endpoint to.
	movedBase = netip.MustParseAddr("100.127.0.0")
)

// nth returns base + n.
func nth(base netip.Addr, n int) netip.Addr {
	b := base.As4()
	v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	v += uint32(n)
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

func benchImport(name, vip string) *mcsv1beta1.ServiceImport {
	si := &mcsv1beta1.ServiceImport{
		ObjectMeta: metav1.ObjectMeta{Namespace: benchNS, Name: name},
		Spec:       mcsv1beta1.ServiceImportSpec{Type: mcsv1beta1.ClusterSetIP, IPs: []string{vip}},
	}
	for _, p := range benchPorts {
		si.Spec.Ports = append(si.Spec.Ports, mcsv1beta1.ServicePort{Name: p.name, Protocol: v1.ProtocolTCP, Port: p.port})
	}
	return si
}

// benchSlice is the MCS EndpointSlice of one cluster's endpoints of an
// import, shaped as the importer writes it.
func benchSlice(service, cluster string, addrs []netip.Addr, target func(port int) int32) *discoveryv1.EndpointSlice {
	sp := mcsslice.ServicePorts{}
	s := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: benchNS,
			Name:      service + "-" + cluster,
			Labels: map[string]string{
				mcsv1beta1.LabelServiceName:   service,
				mcsv1beta1.LabelSourceCluster: cluster,
			},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
	}
	for i, p := range benchPorts {
		sp.Add(p.name, v1.ProtocolTCP, p.port)
		s.Ports = append(s.Ports, discoveryv1.EndpointPort{Name: ptr.To(p.name), Protocol: ptr.To(v1.ProtocolTCP), Port: ptr.To(target(i))})
	}
	s.Annotations = map[string]string{mcsslice.ServicePortsAnnotation: sp.Encode()}
	for _, a := range addrs {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{a.String()},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}})
	}
	return s
}

func benchTarget(i int) int32 { return benchPorts[i].target }

// benchEndpoints are import i's endpoints, split between the two clusters.
func benchEndpoints(i int) (local, remote []netip.Addr) {
	for j := 0; j < endpointsPerService; j++ {
		a := nth(endpointBase, i*endpointsPerService+j)
		if j < endpointsPerService/2 {
			local = append(local, a)
		} else {
			remote = append(remote, a)
		}
	}
	return local, remote
}

// proxierRun is one proxier programming the topology's node from scratch.
type proxierRun struct {
	topo     *topology
	mode     proxier.Mode
	reg      *prometheus.Registry
	nft      knftables.Interface
	ipt      netfilter.IPTables
	counter  netfilter.RuleCounter
	p        *proxier.Proxier
	clock    *shiftedClock
	observer *vipWaiter
	// nftFirst and iptFirst keep the first sync's input, for the limit.
	nftFirst *firstNFT
	iptFirst *firstRestores
	cancel   context.CancelFunc
	done     chan struct{}
}

func newProxierRun(topo *topology, mode proxier.Mode) (*proxierRun, error) {
	r := &proxierRun{topo: topo, mode: mode, reg: prometheus.NewRegistry(), clock: &shiftedClock{}, observer: newVIPWaiter()}
	var ct netfilter.Conntrack
	err := topo.node.Do(func() (err error) {
		// Each run starts from an empty node: no leftovers of either mode.
		_ = proxier.CleanupLeftovers(context.Background(), proxier.ModeAuto, nil)
		if mode == proxier.ModeIPTables {
			r.ipt, err = netfilter.NewIPTables(v1.IPv4Protocol, topo.node.Do)
		} else {
			if r.nft, err = knftables.New(knftables.IPv4Family, proxier.TableName); err != nil {
				return err
			}
			r.counter, err = netfilter.NewRuleCounter(proxier.TableName)
		}
		if err != nil {
			return err
		}
		ct, err = netfilter.NewConntrack()
		return err
	})
	if err != nil {
		return nil, err
	}
	if r.ipt != nil {
		r.iptFirst = &firstRestores{IPTables: r.ipt}
		r.ipt = r.iptFirst
	}
	if r.nft != nil {
		r.nftFirst = &firstNFT{Interface: r.nft}
		r.nft = r.nftFirst
	}
	r.p, err = proxier.New(proxier.Config{
		Mode:      mode,
		IPTables:  r.ipt,
		ClusterID: localCluster,
		// As mcsd --node-name: the endpoints run on other nodes, so no
		// hairpin entries (kube-proxy likewise only marks this node's).
		NodeName:    "bench-node",
		IPFamily:    v1.IPv4Protocol,
		NFTables:    r.nft,
		Conntrack:   ct,
		RuleCounter: r.counter,
		PodCIDRs:    []string{podCIDR},
		// The bench's own pace; mcsd's default is one second.
		MinSyncPeriod: 100 * time.Millisecond,
		// The periodic table check is timed on its own (tableCheck).
		SyncPeriod:  time.Hour,
		Clock:       r.clock,
		VIPObserver: r.observer,
		Registerer:  r.reg,
	})
	return r, err
}

// measure loads n imports (plus the one whose endpoint is the backend), times
// the first full sync, partial syncs after one import changes, a periodic
// resync and a change made as one starts, and, if asked, the connect latency
// through the ClusterSetIP.
func (r *proxierRun) measure(ctx context.Context, n int, withLatency bool, samples int) (syncTimes, latency, error) {
	res := syncTimes{load: loadAverage()}
	var lat latency
	r.p.OnServiceImportAdd(benchImport(latencyImport, latencyVIP))
	r.p.OnEndpointSliceAdd(benchSlice(latencyImport, localCluster, []netip.Addr{netip.MustParseAddr(backendAddr)},
		func(int) int32 { return backendPort }))
	slices := make([]*discoveryv1.EndpointSlice, n)
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("svc-%d", i)
		r.p.OnServiceImportAdd(benchImport(name, nth(vipBase, i).String()))
		local, remote := benchEndpoints(i)
		slices[i] = benchSlice(name, localCluster, local, benchTarget)
		r.p.OnEndpointSliceAdd(slices[i])
		r.p.OnEndpointSliceAdd(benchSlice(name, remoteCluster, remote, benchTarget))
	}
	// The sync loop runs on a thread inside the node's namespace; once the
	// informers have synced it runs the first (full) sync.
	loopCtx, cancel := context.WithCancel(ctx)
	r.cancel, r.done = cancel, make(chan struct{})
	go func() {
		defer close(r.done)
		_ = r.topo.node.Do(func() error { r.p.SyncLoop(loopCtx); return nil })
	}()
	stopProfile, err := startProfile(fmt.Sprintf("first-sync.%s.%d", r.mode, n))
	if err != nil {
		return res, lat, err
	}
	cpuBefore := cpuUsed()
	r.p.OnServiceImportsSynced()
	r.p.OnEndpointSlicesSynced()
	full, err := waitHistogram(ctx, r.reg, fullMetric, 1, syncWait)
	res.fullCPU = cpuUsed() - cpuBefore
	stopProfile()
	if err != nil {
		return res, lat, fmt.Errorf("the first sync did not succeed: %w", err)
	}
	res.full = full
	res.heap, res.rss = memory()

	if n > 0 {
		var partials []time.Duration
		changed := n / 2
		local, _ := benchEndpoints(changed)
		for k := 0; k < partialSyncs; k++ {
			before, count := histogram(r.reg, partialMetric)
			// One endpoint of one import moves: one element changes.
			moved := append([]netip.Addr{nth(movedBase, changed*partialSyncs+k)}, local[1:]...)
			next := benchSlice(slices[changed].Labels[mcsv1beta1.LabelServiceName], localCluster, moved, benchTarget)
			r.p.OnEndpointSliceUpdate(slices[changed], next)
			slices[changed] = next
			after, err := waitHistogram(ctx, r.reg, partialMetric, count+1, syncWait)
			if err != nil {
				return res, lat, err
			}
			partials = append(partials, after-before)
		}
		res.partial = median(partials)
		if res.resync, err = r.resync(ctx); err != nil {
			return res, lat, err
		}
		if res.delay, err = r.changeDuringResync(ctx, n); err != nil {
			return res, lat, err
		}
		if res.check, err = r.tableCheck(); err != nil {
			return res, lat, err
		}
	}
	if withLatency {
		lat, err = r.topo.connectLatency(ctx, latencyVIP+":80", samples)
	}
	return res, lat, err
}

// resync moves the proxier's clock past its full sync period and times the
// periodic resync that follows.
func (r *proxierRun) resync(ctx context.Context) (time.Duration, error) {
	before, count := histogram(r.reg, fullMetric)
	r.clock.shift(proxier.DefaultFullSyncPeriod)
	r.p.Sync()
	after, err := waitHistogram(ctx, r.reg, fullMetric, count+1, syncWait)
	return after - before, err
}

// changeDuringResync starts a periodic resync and at once adds an import
// with a new ClusterSetIP, and returns how long that import took to be
// reported carried: what a change waits while a resync runs.
func (r *proxierRun) changeDuringResync(ctx context.Context, n int) (time.Duration, error) {
	vip := nth(vipBase, n+1000)
	name := "resync-probe"
	_, count := histogram(r.reg, fullMetric)
	r.clock.shift(proxier.DefaultFullSyncPeriod)
	r.p.Sync()
	start := time.Now()
	r.p.OnServiceImportAdd(benchImport(name, vip.String()))
	local, _ := benchEndpoints(n + 1000)
	r.p.OnEndpointSliceAdd(benchSlice(name, localCluster, local, benchTarget))
	if err := r.observer.wait(ctx, vip, syncWait); err != nil {
		return 0, err
	}
	delay := time.Since(start)
	if _, err := waitHistogram(ctx, r.reg, fullMetric, count+1, syncWait); err != nil {
		return 0, err
	}
	return delay, nil
}

// Metrics the bench reads its times from.
const (
	fullMetric    = "mcsd_proxier_sync_full_proxy_rules_duration_seconds"
	partialMetric = "mcsd_proxier_sync_partial_proxy_rules_duration_seconds"
)

// shiftedClock is the real clock, with Now moved forward by shift, so that
// the bench can make the proxier's full sync period pass at once.
type shiftedClock struct {
	clock.RealClock
	offset atomic.Int64
}

func (c *shiftedClock) shift(d time.Duration) { c.offset.Add(int64(d)) }

func (c *shiftedClock) Now() time.Time {
	return c.RealClock.Now().Add(time.Duration(c.offset.Load()))
}

func (c *shiftedClock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }

// vipWaiter is the proxier's VIPObserver: it lets the bench wait until a
// ClusterSetIP is carried.
type vipWaiter struct {
	mu      sync.Mutex
	carried map[netip.Addr]bool
	changed chan struct{}
}

func newVIPWaiter() *vipWaiter {
	return &vipWaiter{carried: map[netip.Addr]bool{}, changed: make(chan struct{}, 1)}
}

func (w *vipWaiter) VIPsProgrammed(_ v1.IPFamily, added, removed []netip.Addr) {
	w.mu.Lock()
	for _, a := range added {
		w.carried[a] = true
	}
	for _, a := range removed {
		delete(w.carried, a)
	}
	w.mu.Unlock()
	select {
	case w.changed <- struct{}{}:
	default:
	}
}

func (w *vipWaiter) wait(ctx context.Context, vip netip.Addr, timeout time.Duration) error {
	deadline := time.After(timeout)
	for {
		w.mu.Lock()
		ok := w.carried[vip]
		w.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-w.changed:
		case <-deadline:
			return fmt.Errorf("ClusterSetIP %s not carried after %v", vip, timeout)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// syncWait bounds the wait for one partial sync; on a busy machine a sync
// of a large table can take far longer than on an idle one.
const syncWait = 10 * time.Minute

// tableCheck times what the proxier runs once per sync period to notice a
// table flushed or deleted behind its back: a netlink count of the rules of
// its nat-prerouting chain.
//
// In iptables mode it is "iptables -C" of the jump from nat PREROUTING,
// which reads the nat table; timed here with a rule of that chain.
func (r *proxierRun) tableCheck() (time.Duration, error) {
	if r.mode == proxier.ModeIPTables {
		var elapsed time.Duration
		err := r.topo.node.Do(func() error {
			start := time.Now()
			err := exec.Command("iptables", "-w", "5", "-t", "nat", "-C", "PREROUTING", "-j", "MCSD-SERVICES").Run()
			elapsed = time.Since(start)
			// Status 1: no such rule (the real jump has a comment too).
			if exit := (*exec.ExitError)(nil); errors.As(err, &exit) && exit.ExitCode() == 1 {
				return nil
			}
			return err
		})
		if err != nil {
			return 0, fmt.Errorf("iptables -C in the node: %w", err)
		}
		return elapsed, nil
	}
	var elapsed time.Duration
	err := r.topo.node.Do(func() error {
		start := time.Now()
		n, err := r.counter.CountRules(v1.IPv4Protocol, "nat-prerouting")
		elapsed = time.Since(start)
		if err == nil && n == 0 {
			err = fmt.Errorf("nat-prerouting is empty")
		}
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("counting the rules of the nat-prerouting chain: %w", err)
	}
	return elapsed, nil
}

func (r *proxierRun) close() {
	if r.cancel != nil {
		r.cancel()
		<-r.done
	}
}

// histogram returns the IPv4 sum and count of a histogram in reg.
func histogram(reg *prometheus.Registry, name string) (time.Duration, uint64) {
	families, err := reg.Gather()
	if err != nil {
		return 0, 0
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "ip_family" && l.GetValue() == string(v1.IPv4Protocol) {
					h := m.GetHistogram()
					return time.Duration(h.GetSampleSum() * float64(time.Second)), h.GetSampleCount()
				}
			}
		}
	}
	return 0, 0
}

// waitHistogram waits until the histogram has count observations and
// returns its sum.
func waitHistogram(ctx context.Context, reg *prometheus.Registry, name string, count uint64, timeout time.Duration) (time.Duration, error) {
	deadline := time.Now().Add(timeout)
	for {
		sum, c := histogram(reg, name)
		if c >= count {
			return sum, nil
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("%s: %d observations after %v, want %d", name, c, timeout, count)
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}
