package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	kuberecord "k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/mcsd-io/mcsd/broker"
	"github.com/mcsd-io/mcsd/clusterid"
	"github.com/mcsd-io/mcsd/dnsgate"
	"github.com/mcsd-io/mcsd/exporter"
	"github.com/mcsd-io/mcsd/importer"
	"github.com/mcsd-io/mcsd/internal/caches"
	"github.com/mcsd-io/mcsd/internal/controller"
	"github.com/mcsd-io/mcsd/internal/dialgate"
	"github.com/mcsd-io/mcsd/internal/record"
	"github.com/mcsd-io/mcsd/internal/version"
	"github.com/mcsd-io/mcsd/liveness"
	"github.com/mcsd-io/mcsd/mcsslice"
	"github.com/mcsd-io/mcsd/vipalloc"
)

// controllers is the role one replica of the cluster plays at a time
// (leader election): the exporter, the importer with the liveness
// controller it asks, and the cluster's heartbeat on the broker. It alone
// writes, to the local cluster and to the broker. Each leadership term
// builds its clients, informers and controllers anew (a term).
type controllers struct {
	o         *options
	local     *clients
	clusterID string
	// nodeInformers are the node agent's informers in this process, whose
	// ServiceImports and MCS EndpointSlices the importer shares; nil
	// without a node agent.
	nodeInformers *caches.Local

	exporterMetrics *exporter.Metrics
	importerMetrics *importer.Metrics
	livenessMetrics *liveness.Metrics

	exporter atomic.Pointer[exporter.Controller]
	importer atomic.Pointer[importer.Controller]
	leading  atomic.Bool
	// election is what /statusz says of the leader election.
	election election
}

func newControllers(o *options, local *clients, clusterID string, reg prometheus.Registerer, node *nodeAgent) *controllers {
	c := &controllers{o: o, local: local, clusterID: clusterID}
	if node != nil {
		c.nodeInformers = node.informers
	}
	// Registered once, whatever the number of leadership terms.
	if o.runs(componentExporter) {
		c.exporterMetrics = exporter.NewMetrics(reg)
	}
	if o.runs(componentImporter) {
		c.importerMetrics = importer.NewMetrics(reg)
		c.livenessMetrics = liveness.NewMetrics(reg)
	}
	return c
}

// run joins the ClusterSet, claims this cluster's VIP blocks and runs the
// controllers and the heartbeat until ctx ends.
func (c *controllers) run(ctx context.Context) error {
	c.leading.Store(true)
	defer c.leading.Store(false)
	ctx = klog.NewContext(ctx, klog.FromContext(ctx).WithValues("clusterID", c.clusterID))
	t, err := c.newTerm(ctx)
	if err != nil {
		return err
	}
	defer t.stop()
	if err := clusterid.NewResolver(c.local.kube, c.local.dynamic).Join(ctx, c.o.clusterSet); err != nil {
		return fmt.Errorf("--clusterset: %w", err)
	}
	if c.o.runs(componentExporter) {
		if err := t.newExporter(ctx); err != nil {
			return err
		}
		c.exporter.Store(t.exp)
		defer c.exporter.Store(nil)
	}
	if c.o.runs(componentImporter) {
		if err := t.newImporter(); err != nil {
			return err
		}
		c.importer.Store(t.imp)
		defer c.importer.Store(nil)
	}
	return t.run(ctx)
}

// leaderTerm is one leadership term: its clients (each with a rate limiter of
// its own, see newClients), the informers its controllers share, and the
// controllers.
type leaderTerm struct {
	c *controllers
	// broker writes this cluster's records; heartbeat renews its Lease;
	// probe asks whether the broker answers, never waiting behind the
	// exporter's writes (a probe that times out means "the broker is
	// down"); watch is what the informers read through.
	broker, heartbeat, probe, watch *clients
	// exporterLocal and importerLocal write to this cluster; localRead is
	// what the informers of this cluster read through.
	exporterLocal, importerLocal, localRead *clients
	// gate holds the informers' connections while the heartbeat cannot
	// reach the broker: after an outage they resume with its first
	// success, not after client-go's retry backoff.
	gate       *dialgate.Gate
	brokerHost string
	// logger is the term's, for what no context reaches: event handlers,
	// the heartbeat's reports.
	logger      klog.Logger
	recorder    kuberecord.EventRecorder
	stopEvents  func()
	local       *caches.Local
	brokerCache *caches.Broker
	// ranges are the clusterset ranges and block sizes of the broker's
	// settings, read when the term starts and kept for all of it.
	ranges broker.Ranges

	exp  *exporter.Controller
	imp  *importer.Controller
	live *liveness.Controller
	// stopInformers ends the informers (and anything still running) before
	// they are shut down, whatever ends the term.
	stopInformers context.CancelFunc
}

func (c *controllers) newTerm(ctx context.Context) (*leaderTerm, error) {
	brokerCfg, err := brokerConfig(ctx, c.o, c.local.kube)
	if err != nil {
		return nil, err
	}
	t := &leaderTerm{c: c, gate: dialgate.New(), brokerHost: brokerCfg.Host, logger: klog.FromContext(ctx)}
	watchCfg := rest.CopyConfig(brokerCfg)
	var dialer net.Dialer
	watchCfg.Dial = t.gate.Dial(dialer.DialContext)
	for _, n := range []struct {
		dst  **clients
		cfg  *rest.Config
		what string
	}{
		{&t.broker, brokerCfg, "broker"}, {&t.heartbeat, brokerCfg, "broker"}, {&t.probe, brokerCfg, "broker"},
		{&t.watch, watchCfg, "broker"}, {&t.exporterLocal, c.local.config, "local cluster"}, {&t.importerLocal, c.local.config, "local cluster"},
		{&t.localRead, c.local.config, "local cluster"},
	} {
		if *n.dst, err = newClients(n.cfg, c.o.clientQPS, c.o.clientBurst); err != nil {
			return nil, fmt.Errorf("%s clients: %w", n.what, err)
		}
	}
	t.recorder, t.stopEvents = controller.NewRecorder(c.local.kube, "mcsd")
	t.local = caches.NewLocal(t.localRead.kube, t.localRead.mcs, c.o.controllerResync, caches.LocalOptions{
		SliceSelector:  mcsslice.ImporterSelector,
		SliceTransform: importer.TrimOwnSlice,
		ImportsFrom:    c.nodeInformers,
	})
	t.brokerCache = caches.NewBroker(t.watch.kube, t.watch.mcs, c.o.brokerNamespace, c.clusterID, c.o.controllerResync)
	if err := t.readRanges(ctx); err != nil {
		t.stop()
		return nil, err
	}
	return t, nil
}

// readRanges takes the clusterset ranges from the broker's settings,
// refusing flags that disagree, and watches the settings for a change
// while the term runs.
func (t *leaderTerm) readRanges(ctx context.Context) error {
	settings, err := broker.ReadSettings(ctx, t.broker.kube, t.c.o.brokerNamespace)
	if err != nil {
		return err
	}
	if t.ranges, err = t.c.o.rangesWithBroker(settings); err != nil {
		return err
	}
	ranges := t.ranges.String()
	t.c.election.brokerRanges.Store(&ranges)
	klog.FromContext(ctx).Info("Running with the broker's clusterset ranges", "settings", klog.KRef(settings.Namespace, broker.SettingsName), "ranges", ranges)
	w := &rangesWatch{running: t.ranges, recorder: t.recorder, logger: t.logger, object: t.eventObject}
	_, err = t.brokerCache.Settings().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    w.observe,
		UpdateFunc: func(_, obj any) { w.observe(obj) },
	})
	return err
}

// eventObject is what events about the whole cluster are recorded on: the
// liveness ConfigMap, where kubectl mcs status reads.
func (t *leaderTerm) eventObject() runtime.Object {
	if t.live != nil {
		return t.live.Object()
	}
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: t.c.o.leaderElectNS, Name: liveness.ConfigMapName}}
}

// shared is what every controller of the term is built with, writing
// through local (this cluster) and broker.
func (t *leaderTerm) shared(local, broker *clients, workers int) controller.Shared {
	s := controller.Shared{
		ClusterID:       t.c.clusterID,
		BrokerNamespace: t.c.o.brokerNamespace,
		Local:           local.kube,
		LocalMCS:        local.mcs,
		Recorder:        t.recorder,
		Workers:         workers,
		Logger:          t.logger,
	}
	if broker != nil {
		s.Broker, s.BrokerMCS = broker.kube, broker.mcs
	}
	return s
}

// newExporter claims this cluster's VIP blocks and builds the exporter.
func (t *leaderTerm) newExporter(ctx context.Context) error {
	allocators, err := t.c.claimBlocks(ctx, t.broker, t.ranges)
	if err != nil {
		return err
	}
	t.exp, err = exporter.New(exporter.Config{
		Shared:          t.shared(t.exporterLocal, t.broker, t.c.o.exporterWorkers),
		ClusterSetIPs:   t.c.o.clusterSetIPs,
		Allocators:      allocators,
		ClusterSetCIDRs: t.ranges.CIDRs,
		Metrics:         t.c.exporterMetrics,
	}, t.local, t.brokerCache)
	return err
}

// newImporter builds the liveness controller and the importer that asks
// it; a broker watch that fails has liveness probe the broker at once.
func (t *leaderTerm) newImporter() error {
	o := t.c.o
	var err error
	t.live, err = liveness.New(liveness.Config{
		Shared:    t.shared(t.importerLocal, t.probe, 0),
		Namespace: o.leaderElectNS,
		TTL:       o.clusterTTL,
		Grace:     o.goneClusterGrace,
		Metrics:   t.c.livenessMetrics,
		Wrote:     t.c.importerMetrics.Wrote,
	}, t.brokerCache)
	if err != nil {
		return err
	}
	t.brokerCache.OnWatchError = t.live.RequestProbe
	t.imp, err = importer.New(importer.Config{
		Shared:                t.shared(t.importerLocal, nil, o.importerWorkers),
		Liveness:              t.live,
		ClusterTTL:            o.clusterTTL,
		Metrics:               t.c.importerMetrics,
		ClusterSetCIDRs:       t.ranges.CIDRs,
		DeniedNamespaces:      o.importDeniedNamespaces,
		MaxServicesPerCluster: o.maxServicesPerCluster,
		IPFamilies:            o.ipFamilies,
	}, t.local, t.brokerCache)
	return err
}

// run starts the informers, then runs the term's controllers and the
// heartbeat until ctx ends or one fails, which stops the others.
func (t *leaderTerm) run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	t.stopInformers = cancel
	t.local.Start(ctx.Done())
	t.brokerCache.Start(ctx.Done())
	var runs []func(context.Context) error
	if t.live != nil {
		runs = append(runs, t.live.Run)
	}
	if t.exp != nil {
		runs = append(runs, t.exp.Run)
	}
	if t.imp != nil {
		runs = append(runs, t.imp.Run)
		agg, err := t.newGateAggregator()
		if err != nil {
			return err
		}
		runs = append(runs, func(ctx context.Context) error { agg.Run(ctx); return nil })
	}
	hb := t.newHeartbeat()
	runs = append(runs, func(ctx context.Context) error { hb.Run(ctx); return nil })
	klog.FromContext(ctx).Info("Running controllers", "components", t.c.o.components, "broker", t.brokerHost, "brokerNamespace", t.c.o.brokerNamespace)
	errc := make(chan error, len(runs))
	for _, run := range runs {
		go func() { errc <- run(ctx) }()
	}
	var first error
	var errs []error
	for range runs {
		err := <-errc
		switch {
		case err != nil && ctx.Err() == nil:
			first = err
			cancel()
		case err != nil:
			errs = append(errs, err)
		}
	}
	if first != nil {
		return first
	}
	return errors.Join(errs...)
}

// newGateAggregator folds the node agents' data-plane reports into the
// one summary their DNS gates watch (package dnsgate). It runs beside the
// importer, which assigns the ClusterSetIPs the gate holds back.
func (t *leaderTerm) newGateAggregator() (*dnsgate.Aggregator, error) {
	holder := loadString(&t.c.election.identity)
	if holder == "" {
		holder = "mcsd-controller"
	}
	return dnsgate.NewAggregator(dnsgate.AggregatorConfig{
		Client:    t.importerLocal.kube,
		Namespace: t.c.o.leaderElectNS,
		PeerPods:  t.c.o.dnsGatePeers,
		Holder:    holder,
		Writing:   dnsgate.Writing{Logger: t.logger.WithName("dnsgate")},
	})
}

// newHeartbeat renews this cluster's Lease: it says the cluster is alive;
// only a cluster that exports has endpoints for others to drop, but an
// importing-only cluster's Lease costs one write every few seconds and
// keeps the rule simple. It is exporter.Heartbeat rather than
// component-helpers' lease controller, which reports no successful renewal
// (the dial gate and the broker conditions need each outcome), backs off
// inside one tick and deletes the Lease at start and stop: README, "The
// heartbeat is not component-helpers' lease controller".
func (t *leaderTerm) newHeartbeat() *exporter.Heartbeat {
	o := t.c.o
	return &exporter.Heartbeat{
		Broker:    t.heartbeat.kube,
		Namespace: record.MemberNamespace(o.brokerNamespace, t.c.clusterID),
		Name:      record.LeaseName(t.c.clusterID),
		ClusterID: t.c.clusterID,
		Duration:  o.leaseDuration,
		Interval:  o.leaseDuration / 5,
		Version:   version.Get().Version,
		OnRenew: func(err error) {
			t.gate.Observe(err)
			if t.c.exporterMetrics != nil {
				t.c.exporterMetrics.ObserveLeaseRenewal(err)
			}
			if t.exp != nil {
				t.exp.ObserveBroker(err)
			}
			if t.live != nil {
				t.live.ObserveBroker(err)
			}
		},
	}
}

// stop ends the term's informers and events once its controllers are
// done, and removes what handlers a controller that never ran left on
// informers that outlive the term (the node agent's).
func (t *leaderTerm) stop() {
	if t.stopInformers != nil {
		t.stopInformers()
	}
	if t.exp != nil {
		t.exp.Release()
	}
	if t.imp != nil {
		t.imp.Release()
	}
	// The broker informers' requests wait at a closed gate while the
	// broker is down; some have no context to end them.
	t.gate.Stop()
	t.local.Shutdown()
	t.brokerCache.Shutdown()
	t.stopEvents()
}

// claimBlocks claims (or finds again) this cluster's VIP block of every
// clusterset range on the broker and returns an allocator per family.
func (c *controllers) claimBlocks(ctx context.Context, brokerClients *clients, ranges broker.Ranges) (map[corev1.IPFamily]*vipalloc.Allocator, error) {
	allocators := map[corev1.IPFamily]*vipalloc.Allocator{}
	if !c.o.clusterSetIPs {
		// A ServiceExport may still ask for a VIP by annotation: claim anyway.
		klog.FromContext(ctx).V(2).Info("ClusterSetIPs are off by default; claiming blocks for exports that turn them on")
	}
	claimer := vipalloc.Claimer{Kube: brokerClients.kube, Namespace: c.o.brokerNamespace, ClusterID: c.clusterID}
	for _, set := range ranges.CIDRs {
		v4 := set.Addr().Is4()
		requested, _ := prefixOfFamily(c.o.clusterVIPCIDRs, v4)
		block, err := claimer.Claim(ctx, set, requested, ranges.BlockBits(v4))
		if err != nil {
			flagName := "clusterset-cidrs"
			if requested.IsValid() {
				flagName = "cluster-vip-cidrs"
			}
			return nil, fmt.Errorf("--%s: %w", flagName, err)
		}
		family := corev1.IPv4Protocol
		if !v4 {
			family = corev1.IPv6Protocol
		}
		allocators[family] = vipalloc.NewAllocator(block)
		klog.FromContext(ctx).Info("Holding ClusterSetIP block", "family", family, "block", block)
	}
	return allocators, nil
}
