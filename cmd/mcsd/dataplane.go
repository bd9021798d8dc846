package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/server/healthz"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"sigs.k8s.io/knftables"
	mcsinformers "sigs.k8s.io/mcs-api/pkg/client/informers/externalversions"

	"github.com/mcsd-io/mcsd/clustergate"
	"github.com/mcsd-io/mcsd/dns"
	"github.com/mcsd-io/mcsd/importer"
	"github.com/mcsd-io/mcsd/internal/trim"
	"github.com/mcsd-io/mcsd/liveness"
	"github.com/mcsd-io/mcsd/nsenter"
	"github.com/mcsd-io/mcsd/proxier"
)

// dataPlane is what every replica runs: the clusterset DNS server and the
// proxier, fed by one set of informers on the local cluster's ServiceImports
// and MCS EndpointSlices.
type dataPlane struct {
	imports mcsinformers.SharedInformerFactory
	slices  informers.SharedInformerFactory

	dnsServer *dns.Server
	dnsIndex  *dns.Index
	// gate, with --dns-gate=cluster, reports this node's data plane to
	// the other nodes and holds DNS back until they all carry a
	// ClusterSetIP.
	gate     *clustergate.Gate
	provider proxier.Provider
	health   *proxier.Health
	// fed is true once the proxier has been handed every initial object.
	fed atomic.Bool
}

func newDataPlane(o *options, local *clients, clusterID string, reg prometheus.Registerer) (*dataPlane, error) {
	// Only MCS slices: the core controller's are none of the data plane's
	// business. When this daemon imports too, only those its importer
	// writes, so that the importer shares this cache.
	selector := dns.EndpointSliceSelector
	if o.runs(componentImporter) {
		selector = importer.SharedSliceSelector
	}
	dp := &dataPlane{
		imports: mcsinformers.NewSharedInformerFactory(local.mcs, 0),
		slices: informers.NewSharedInformerFactoryWithOptions(local.kube, 0,
			informers.WithTweakListOptions(func(lo *metav1.ListOptions) { lo.LabelSelector = selector })),
	}
	for _, inf := range []cache.SharedIndexInformer{
		dp.imports.Multicluster().V1beta1().ServiceImports().Informer(),
		dp.slices.Discovery().V1().EndpointSlices().Informer(),
	} {
		if err := inf.SetTransform(trim.ManagedFields); err != nil {
			return nil, err
		}
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
			gate, err := newGate(o, local, dp.imports.Multicluster().V1beta1().ServiceImports().Informer(), dp.dnsIndex)
			if err != nil {
				return nil, err
			}
			dp.gate, observer = gate, gate
		}
		provider, health, err := newProxier(o, clusterID, reg, observer)
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
func newGate(o *options, local *clients, imports cache.SharedIndexInformer, index *dns.Index) (*clustergate.Gate, error) {
	c, err := newClients(local.config, o.clientQPS, o.clientBurst)
	if err != nil {
		return nil, err
	}
	cfg := clustergate.Config{
		Client:    c.kube,
		Namespace: o.leaderElectNS,
		NodeName:  o.nodeName,
		Families:  o.ipFamilies,
		Imports:   imports,
		Logger:    klog.Background().WithName("clustergate"),
	}
	if index != nil {
		cfg.Downstream = index
	}
	return clustergate.New(cfg)
}

// newProxier builds one proxier per IP family, programming nftables or
// iptables (--proxier-mode) and clearing conntrack entries in the --netns
// namespace. The other mode's rules, from an earlier run, are deleted first.
func newProxier(o *options, clusterID string, reg prometheus.Registerer, observer proxier.VIPObserver) (proxier.Provider, *proxier.Health, error) {
	ctx := context.Background()
	mode, err := proxier.ResolveMode(ctx, o.proxierMode)
	if err != nil {
		return nil, nil, fmt.Errorf("--proxier-mode=%s: %w (or leave the proxier out of --components)", o.proxierMode, err)
	}
	if mode == proxier.ModeIPTables {
		err = proxier.CheckIPTablesRequirements()
	} else {
		err = proxier.CheckRequirements(ctx)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("proxier: %w (or choose another --proxier-mode, or leave the proxier out of --components)", err)
	}
	klog.InfoS("Proxier mode", "mode", mode, "requested", o.proxierMode)
	inNetns := func(fn func() error) error { return nsenter.Do(o.netns, fn) }
	if err := proxier.CleanupOtherMode(ctx, mode, inNetns); err != nil {
		klog.ErrorS(err, "Could not delete the rules of the other proxier mode; they may still catch ClusterSetIP traffic", "mode", mode)
	}
	health := proxier.NewHealth(o.healthTimeout, nil)
	var conntrack proxier.Conntrack
	var counter proxier.RuleCounter
	if err := inNetns(func() (err error) {
		if conntrack, err = proxier.NewConntrack(); err != nil {
			return err
		}
		if mode == proxier.ModeIPTables {
			return nil
		}
		counter, err = proxier.NewNetlinkRuleCounter()
		return err
	}); err != nil {
		return nil, nil, fmt.Errorf("proxier: %w", err)
	}
	cfg := proxier.Config{
		Mode:               mode,
		ClusterID:          clusterID,
		NodeName:           o.nodeName,
		Conntrack:          conntrack,
		RuleCounter:        counter,
		MasqueradeMark:     o.masqMark,
		MasqueradeAll:      o.masqAll,
		PodCIDRs:           o.podCIDRs,
		PreferLocalCluster: o.preferLocal,
		ClusterSetCIDRs:    o.clusterSetCIDRs,
		MinSyncPeriod:      o.minSync,
		SyncPeriod:         o.syncPeriod,
		FullSyncPeriod:     o.fullSync,
		Registerer:         reg,
		Health:             health,
		VIPObserver:        observer,
	}
	var provider proxier.Provider
	if mode == proxier.ModeIPTables {
		ipts := map[corev1.IPFamily]proxier.IPTables{}
		for _, family := range o.ipFamilies {
			if ipts[family], err = proxier.NewIPTablesIn(family, inNetns); err != nil {
				return nil, nil, fmt.Errorf("proxier: iptables for %s (or drop the family from --ip-families): %w", family, err)
			}
		}
		provider, err = providerOf(cfg, ipts, proxier.NewDualStackIPTables, func(c *proxier.Config, ipt proxier.IPTables) { c.IPTables = ipt })
	} else {
		tables := map[corev1.IPFamily]knftables.Interface{}
		for _, family := range o.ipFamilies {
			nftFamily := knftables.IPv4Family
			if family == corev1.IPv6Protocol {
				nftFamily = knftables.IPv6Family
			}
			if tables[family], err = nsenter.NewNFTables(o.netns, nftFamily, proxier.TableName); err != nil {
				return nil, nil, fmt.Errorf("proxier: nftables for %s (needs nft >= %s and kernel >= %s; or drop the family from --ip-families): %w",
					family, proxier.MinNFTVersion, proxier.MinKernelVersion, err)
			}
		}
		provider, err = providerOf(cfg, tables, proxier.NewDualStack, func(c *proxier.Config, nft knftables.Interface) { c.NFTables = nft })
	}
	if err != nil {
		return nil, nil, err
	}
	return provider, health, nil
}

// providerOf is a DualStack over both families' kernel interfaces (nftables
// or iptables) when there are two, else the one family's Proxier, whose
// interface set puts in its Config.
func providerOf[T any](cfg proxier.Config, ifaces map[corev1.IPFamily]T,
	dual func(proxier.Config, T, T) (*proxier.DualStack, error), set func(*proxier.Config, T)) (proxier.Provider, error) {
	if len(ifaces) == 2 {
		ds, err := dual(cfg, ifaces[corev1.IPv4Protocol], ifaces[corev1.IPv6Protocol])
		if err != nil {
			return nil, err
		}
		return ds, nil
	}
	for family, iface := range ifaces {
		cfg.IPFamily = family
		set(&cfg, iface)
	}
	p, err := proxier.New(cfg)
	if err != nil {
		return nil, err
	}
	return p, nil
}

// run serves DNS and programs the proxier until ctx ends. The proxier's
// rules are left in place on exit: traffic keeps flowing while mcsd
// restarts, and the next start takes them over.
func (dp *dataPlane) run(ctx context.Context, o *options, local *clients) error {
	errc := make(chan error, 3)
	running := 0
	var feed *proxier.Feed
	if dp.dnsServer != nil {
		running += 2
		go func() { errc <- dp.dnsIndex.Run(ctx, dp.imports, dp.slices) }()
		go func() { errc <- dp.serveDNS(ctx, o) }()
	}
	if dp.gate != nil {
		go dp.gate.Run(ctx)
	}
	if dp.provider != nil {
		var err error
		feed, err = proxier.NewFeed(dp.imports.Multicluster().V1beta1().ServiceImports().Informer(),
			dp.slices.Discovery().V1().EndpointSlices().Informer(), dp.provider)
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
	// importer's liveness ConfigMap says so, before their slices go.
	var subscribers []func(sets.Set[string])
	if dp.dnsIndex != nil {
		subscribers = append(subscribers, dp.dnsIndex.SetGoneClusters)
	}
	if feed != nil {
		subscribers = append(subscribers, feed.SetGoneClusters)
	}
	watcher, err := liveness.NewWatcher(local.kube, o.leaderElectNS, subscribers...)
	if err != nil {
		return err
	}
	go watcher.Run(ctx)
	dp.imports.Start(ctx.Done())
	dp.slices.Start(ctx.Done())
	for ; running > 0; running-- {
		if err := <-errc; err != nil && ctx.Err() == nil {
			return err
		}
	}
	return nil
}

// serveDNS opens the DNS listeners inside --netns, so pods of the node reach
// them, and serves until ctx ends.
func (dp *dataPlane) serveDNS(ctx context.Context, o *options) error {
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
	klog.InfoS("Serving clusterset DNS", "zone", o.dnsZone, "listen", o.dnsListen, "netns", o.netns, "udpSockets", len(pcs))
	return dp.dnsServer.ServeUDP(ctx, pcs, ln)
}

// readyChecks say whether every data-plane component this replica runs
// answers from synced state.
func (dp *dataPlane) readyChecks() []healthz.HealthChecker {
	var checks []healthz.HealthChecker
	if dp.dnsServer != nil {
		checks = append(checks, healthz.NamedCheck("dns-synced", func(*http.Request) error {
			if !dp.dnsServer.Ready() {
				return errors.New("dns: not serving from a synced index yet")
			}
			return nil
		}))
	}
	if dp.provider != nil {
		checks = append(checks, healthz.NamedCheck("proxier-synced", func(*http.Request) error {
			if !dp.fed.Load() {
				return errors.New("proxier: informers not synced yet")
			}
			return nil
		}))
	}
	return checks
}

// healthChecks say whether the proxier applies queued updates in time.
func (dp *dataPlane) healthChecks() []healthz.HealthChecker {
	if dp.health == nil {
		return nil
	}
	return []healthz.HealthChecker{healthz.NamedCheck("proxier-sync", func(*http.Request) error {
		if ok, last := dp.health.Healthy(); !ok {
			return fmt.Errorf("proxier: a queued update is not applied (last sync %v)", last)
		}
		return nil
	})}
}
