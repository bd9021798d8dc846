package main

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/knftables"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/mcsd-io/mcsd/proxier"
)

// Clusters of the bench: half of every import's endpoints are local, half
// remote, as for a service exported by two clusters.
const (
	localCluster  = "bench-east"
	remoteCluster = "bench-west"
	benchNS       = "bench"
)

// latencyVIP is the ClusterSetIP whose endpoint is the topology's backend.
const latencyVIP = "243.63.255.1"

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
	sp := proxier.ServicePorts{}
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
	s.Annotations = map[string]string{proxier.ServicePortsAnnotation: sp.Encode()}
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

// benchProxier measures the proxier at each size, and the first-packet
// latency through a ClusterSetIP with one import and with the largest size.
func benchProxier(ctx context.Context, sizes []int, samples int) (map[int]syncTimes, error) {
	topo, err := newTopology()
	if err != nil {
		return nil, err
	}
	defer topo.close()
	direct, err := topo.connectLatency(ctx, fmt.Sprintf("%s:%d", backendAddr, backendPort), samples)
	if err != nil {
		return nil, err
	}
	results := map[int]syncTimes{}
	var alone latency
	for i, n := range append([]int{0}, sizes...) {
		run, err := newProxierRun(topo)
		if err != nil {
			return nil, err
		}
		res, lat, err := run.measure(ctx, n, i == 0 || n == sizes[len(sizes)-1], samples)
		run.close()
		if err != nil {
			return nil, fmt.Errorf("%d imports: %w", n, err)
		}
		if n == 0 {
			alone = lat
			fmt.Printf("mcsd     first-packet TCP connect, direct to the backend:        %s\n", direct)
			fmt.Printf("mcsd     first-packet TCP connect, ClusterSetIP, 1 import:       %s\n", lat)
			continue
		}
		results[n] = res
		fmt.Printf("mcsd     %6d imports: full sync %s, partial sync %s (median of %d), periodic table check %s\n",
			n, ms(res.full), ms(res.partial), partialSyncs, ms(res.check))
		if n == sizes[len(sizes)-1] {
			fmt.Printf("mcsd     first-packet TCP connect, ClusterSetIP, %d imports:  %s (1 import: p50 %.3f ms)\n",
				n+1, lat, msf(alone.p50))
		}
	}
	return results, nil
}

// proxierRun is one proxier programming the topology's node from scratch.
type proxierRun struct {
	topo   *topology
	reg    *prometheus.Registry
	nft    knftables.Interface
	p      *proxier.Proxier
	cancel context.CancelFunc
	done   chan struct{}
}

func newProxierRun(topo *topology) (*proxierRun, error) {
	// Each size starts from an empty node: no leftovers to list and delete.
	_, _ = topo.node.Exec("nft", "delete", "table", "ip", proxier.TableName)
	r := &proxierRun{topo: topo, reg: prometheus.NewRegistry()}
	var ct proxier.Conntrack
	err := topo.node.Do(func() (err error) {
		if r.nft, err = knftables.New(knftables.IPv4Family, proxier.TableName); err != nil {
			return err
		}
		ct, err = proxier.NewConntrack()
		return err
	})
	if err != nil {
		return nil, err
	}
	r.p, err = proxier.New(proxier.Config{
		ClusterID: localCluster,
		// As mcsd --node-name: the endpoints run on other nodes, so no
		// hairpin entries (kube-proxy likewise only marks this node's).
		NodeName:      "bench-node",
		IPFamily:      v1.IPv4Protocol,
		NFTables:      r.nft,
		Conntrack:     ct,
		PodCIDRs:      []string{podCIDR},
		MinSyncPeriod: 100 * time.Millisecond,
		// The periodic check of the table (one base-chain listing) would
		// land in whichever sync follows a full sync longer than the sync
		// period, and be timed as part of a partial sync: it is timed on
		// its own instead (tableCheck).
		SyncPeriod: time.Hour,
		Registerer: r.reg,
	})
	return r, err
}

// measure loads n imports (plus the one whose endpoint is the backend), times
// the first full sync and partial syncs after one import changes, and, if
// asked, the connect latency through the ClusterSetIP.
func (r *proxierRun) measure(ctx context.Context, n int, withLatency bool, samples int) (syncTimes, latency, error) {
	var res syncTimes
	var lat latency
	r.p.OnServiceImportAdd(benchImport("latency", latencyVIP))
	r.p.OnEndpointSliceAdd(benchSlice("latency", localCluster, []netip.Addr{netip.MustParseAddr(backendAddr)},
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
	r.p.OnServiceImportsSynced()
	r.p.OnEndpointSlicesSynced()
	full, err := waitHistogram(ctx, r.reg, "mcsd_proxier_sync_full_proxy_rules_duration_seconds", 1, syncWait)
	if err != nil {
		return res, lat, fmt.Errorf("the first sync did not succeed: %w", err)
	}
	res.full = full

	if n > 0 {
		var partials []time.Duration
		changed := n / 2
		local, _ := benchEndpoints(changed)
		for k := 0; k < partialSyncs; k++ {
			before, count := histogram(r.reg, "mcsd_proxier_sync_partial_proxy_rules_duration_seconds")
			// One endpoint of one import moves: its chain is rewritten.
			moved := append([]netip.Addr{nth(movedBase, changed*partialSyncs+k)}, local[1:]...)
			next := benchSlice(slices[changed].Labels[mcsv1beta1.LabelServiceName], localCluster, moved, benchTarget)
			r.p.OnEndpointSliceUpdate(slices[changed], next)
			slices[changed] = next
			after, err := waitHistogram(ctx, r.reg, "mcsd_proxier_sync_partial_proxy_rules_duration_seconds", count+1, syncWait)
			if err != nil {
				return res, lat, err
			}
			partials = append(partials, after-before)
		}
		res.partial = median(partials)
		if res.check, err = r.tableCheck(ctx); err != nil {
			return res, lat, err
		}
	}
	if withLatency {
		lat, err = r.topo.connectLatency(ctx, latencyVIP+":80", samples)
	}
	return res, lat, err
}

// syncWait bounds the wait for one partial sync; on a busy machine a sync
// of a large table can take far longer than on an idle one.
const syncWait = 10 * time.Minute

// tableCheck times what the proxier runs once per sync period to notice a
// table flushed or deleted behind its back: the listing of its nat
// prerouting base chain. nft builds its cache of the table before printing
// the one chain, so this grows with the table.
func (r *proxierRun) tableCheck(ctx context.Context) (time.Duration, error) {
	var elapsed time.Duration
	err := r.topo.node.Do(func() error {
		start := time.Now()
		rules, err := r.nft.ListRules(ctx, "nat-prerouting")
		elapsed = time.Since(start)
		if err == nil && len(rules) == 0 {
			err = fmt.Errorf("nat-prerouting is empty")
		}
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("listing the nat-prerouting chain: %w", err)
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
