package main

import (
	"context"
	"fmt"
	"net"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/mcsd-io/mcsd/dns"
	"github.com/mcsd-io/mcsd/dnsgate"
	"github.com/mcsd-io/mcsd/internal/cacheobj"
	"github.com/mcsd-io/mcsd/internal/caches"
	"github.com/mcsd-io/mcsd/liveness"
	"github.com/mcsd-io/mcsd/mcsslice"
	"github.com/mcsd-io/mcsd/nsenter"
	"github.com/mcsd-io/mcsd/proxier"
)

// nodeAgent is the role every replica plays on its node: the clusterset DNS
// server and the proxier, fed by one set of informers on the local
// cluster's ServiceImports and MCS EndpointSlices, and told which clusters
// are gone by the liveness ConfigMap. It reads those and writes only, with
// --dns-gate=cluster, its node's report Lease (dnsgate).
type nodeAgent struct {
	informers *caches.Local

	dnsServer *dns.Server
	dnsIndex  *dns.Index
	// dnsCheck queries dnsServer on its own socket for the health checks.
	dnsCheck *dnsAnswers
	// gate, with --dns-gate=cluster, reports this node's data plane to
	// the other nodes and holds DNS back until they all carry a
	// ClusterSetIP.
	gate     *dnsgate.Gate
	provider proxier.Provider
	health   *proxier.Health
	// fed is true once the proxier has been handed every initial object.
	fed atomic.Bool
	// events are recorded on this node's Node; nil without --node-name.
	events *nodeEvents
}

func newNodeAgent(o *options, local *clients, clusterID string, reg prometheus.Registerer) (*nodeAgent, error) {
	// Only MCS slices: the core controller's are none of the data plane's
	// business. When this daemon imports too, only those its importer
	// writes, so that the importer shares this cache.
	// Alone, it keeps of each slice only what DNS and the proxier read.
	opts := caches.LocalOptions{SliceSelector: mcsslice.Selector, SliceTransform: cacheobj.DataPlaneSlice(mcsslice.ServicePortsAnnotation, corev1.EndpointsLastChangeTriggerTime)}
	if o.runs(componentImporter) {
		opts = caches.LocalOptions{SliceSelector: mcsslice.ImporterSelector}
	}
	dp := &nodeAgent{informers: caches.NewLocal(local.kube, local.mcs, 0, opts)}
	if o.nodeName != "" {
		dp.events = newNodeEvents(local.kube, o.nodeName)
	}
	if o.runs(componentDNS) {
		dp.dnsIndex = dns.NewIndex(klog.Background().WithName("dns-index"))
		srv, err := dns.New(dns.Config{
			Zone:         o.dnsZone,
			TTL:          o.dnsTTL,
			LocalCluster: clusterID,
			Listen:       o.dnsListen,
			// Authoritative for the reverse zones of the clusterset VIPs,
			// and of the ranges the operator adds (pod CIDRs).
			ReverseCIDRs: append(o.dnsReverseCIDRs[:len(o.dnsReverseCIDRs):len(o.dnsReverseCIDRs)], o.clusterSetCIDRs...),
			Index:        dp.dnsIndex,
			Registerer:   reg,
		})
		if err != nil {
			return nil, fmt.Errorf("--dns-zone/--dns-ttl/--dns-listen/--dns-reverse-cidrs: %w", err)
		}
		dp.dnsServer = srv
		dp.dnsCheck = newDNSAnswers(o.netns, o.dnsZone)
	}
	if o.runs(componentProxier) {
		var observer proxier.VIPObserver
		if dp.dnsIndex != nil {
			// Resolvable means reachable: DNS hands out a ClusterSetIP
			// only once this node's proxier carries it...
			dp.dnsIndex.GateVIPs(o.ipFamilies...)
			observer = dp.dnsIndex
		}
		if o.dnsGate == gateCluster {
			// ... and every other node's: the cluster DNS may have asked
			// this node for a client on another.
			gate, err := newGate(o, local, dp.informers.Imports(), dp.dnsIndex)
			if err != nil {
				return nil, err
			}
			dp.gate, observer = gate, gate
		}
		var syncFailed func(corev1.IPFamily, error)
		if dp.events != nil {
			syncFailed = dp.events.syncFailed
		}
		provider, health, err := newProxier(o, clusterID, reg, observer, syncFailed)
		if err != nil {
			return nil, err
		}
		dp.provider, dp.health = provider, health
	}
	return dp, nil
}

// newGate returns the gate between this node's proxier and its DNS index
// (nil when the node serves no DNS: its report still counts), with a
// client of its own.
func newGate(o *options, local *clients, imports cache.SharedIndexInformer, index *dns.Index) (*dnsgate.Gate, error) {
	c, err := newClients(local.config, o.clientQPS, o.clientBurst)
	if err != nil {
		return nil, err
	}
	cfg := dnsgate.Config{
		Client:    c.kube,
		Namespace: o.leaderElectNS,
		NodeName:  o.nodeName,
		Families:  o.ipFamilies,
		Imports:   imports,
		Writing:   dnsgate.Writing{Logger: klog.Background().WithName("dnsgate")},
	}
	if index != nil {
		cfg.Downstream = index
	}
	return dnsgate.New(cfg)
}

// newProxier builds the proxier of --ip-families, programming nftables or
// iptables (--proxier-mode) in the --netns namespace; syncFailed (nil:
// nobody) is told of each sync the kernel refuses.
func newProxier(o *options, clusterID string, reg prometheus.Registerer, observer proxier.VIPObserver, syncFailed func(corev1.IPFamily, error)) (proxier.Provider, *proxier.Health, error) {
	health := proxier.NewHealth(o.healthTimeout, nil)
	cfg := proxier.Config{
		Mode:               o.proxierMode,
		InNetns:            func(fn func() error) error { return nsenter.Do(o.netns, fn) },
		ClusterID:          clusterID,
		NodeName:           o.nodeName,
		MasqueradeMark:     o.masqMark,
		MasqueradeAll:      o.masqAll,
		PodCIDRs:           o.podCIDRs,
		PreferLocalCluster: o.preferLocal,
		ClusterSetCIDRs:    o.clusterSetCIDRs,
		MinSyncPeriod:      o.minSync,
		SyncPeriod:         o.syncPeriod,
		FullSyncPeriod:     o.fullSync,
		Registerer:         reg,
		Logger:             klog.Background().WithName("proxier"),
		Health:             health,
		SyncFailed:         syncFailed,
		VIPObserver:        observer,
	}
	var provider proxier.Provider
	var err error
	if len(o.ipFamilies) == 2 {
		provider, err = proxier.NewDualStack(cfg)
	} else {
		cfg.IPFamily = o.ipFamilies[0]
		provider, err = proxier.New(cfg)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("--proxier-mode=%s, --ip-families, --netns: %w (or choose another --proxier-mode, or leave the proxier out of --components)", o.proxierMode, err)
	}
	return provider, health, nil
}

// run serves DNS and programs the proxier until ctx ends. The proxier's
// rules are left in place on exit: traffic keeps flowing while mcsd
// restarts, and the next start takes them over.
func (dp *nodeAgent) run(ctx context.Context, o *options, local *clients) error {
	if dp.events != nil {
		defer dp.events.stop()
		dp.events.starting(o.components, dp.proxierMode())
	}
	errc := make(chan error, 3)
	running := 0
	var feed *proxier.Feed
	imports, slices := dp.informers.Imports(), dp.informers.MCSSlices()
	if dp.dnsServer != nil {
		running += 2
		go func() { errc <- dp.dnsIndex.Run(ctx, imports, slices) }()
		go func() { errc <- dp.serveDNS(ctx, o) }()
	}
	if dp.gate != nil {
		go dp.gate.Run(ctx)
	}
	if dp.provider != nil {
		var err error
		feed, err = proxier.NewFeed(imports, slices, dp.provider)
		if err != nil {
			return err
		}
		running++
		go func() { dp.provider.SyncLoop(ctx); errc <- nil }()
		go func() {
			if feed.Run(ctx) {
				dp.fed.Store(true)
			}
		}()
	}
	// A gone cluster's endpoints leave DNS and the proxier as soon as the
	// liveness ConfigMap says so, before their slices go.
	var subscribers []func(mcsslice.GoneClusters)
	if dp.dnsIndex != nil {
		subscribers = append(subscribers, dp.dnsIndex.SetGoneClusters)
	}
	if feed != nil {
		subscribers = append(subscribers, feed.SetGoneClusters)
	}
	watcher, err := liveness.NewWatcher(klog.FromContext(ctx).WithName("liveness-watcher"), local.kube, o.leaderElectNS, subscribers...)
	if err != nil {
		return err
	}
	go watcher.Run(ctx)
	dp.informers.Start(ctx.Done())
	for ; running > 0; running-- {
		if err := <-errc; err != nil && ctx.Err() == nil {
			return err
		}
	}
	return nil
}

// proxierMode is the mode the proxier runs in; empty without one.
func (dp *nodeAgent) proxierMode() string {
	if m, ok := dp.provider.(interface{ Mode() proxier.Mode }); ok {
		return string(m.Mode())
	}
	return ""
}

// serveDNS opens the DNS listeners inside --netns, so pods of the node reach
// them, and serves until ctx ends.
func (dp *nodeAgent) serveDNS(ctx context.Context, o *options) error {
	var pcs []net.PacketConn
	var ln net.Listener
	err := nsenter.Do(o.netns, func() error {
		var err error
		// One UDP socket per core (SO_REUSEPORT): the kernel spreads
		// queries over them instead of queueing all on one.
		if pcs, err = dns.ListenUDP(ctx, o.dnsListen); err != nil {
			return fmt.Errorf("--dns-listen: UDP %s: %w", o.dnsListen, err)
		}
		var lc net.ListenConfig
		if ln, err = lc.Listen(ctx, "tcp", o.dnsListen); err != nil {
			for _, pc := range pcs {
				pc.Close()
			}
			return fmt.Errorf("--dns-listen: TCP %s: %w", o.dnsListen, err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	klog.FromContext(ctx).Info("Serving clusterset DNS", "zone", o.dnsZone, "listen", o.dnsListen, "netns", o.netns, "udpSockets", len(pcs))
	dp.dnsCheck.serving(pcs[0].LocalAddr())
	return dp.dnsServer.ServeUDP(ctx, pcs, ln)
}
