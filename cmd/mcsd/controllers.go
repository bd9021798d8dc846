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
	"k8s.io/apiserver/pkg/server/healthz"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	mcsinformers "sigs.k8s.io/mcs-api/pkg/client/informers/externalversions"

	"github.com/mcsd-io/mcsd/clusterid"
	"github.com/mcsd-io/mcsd/clustersetip"
	"github.com/mcsd-io/mcsd/exporter"
	"github.com/mcsd-io/mcsd/importer"
	"github.com/mcsd-io/mcsd/internal/dialgate"
	"github.com/mcsd-io/mcsd/internal/events"
	"github.com/mcsd-io/mcsd/internal/record"
	"github.com/mcsd-io/mcsd/internal/version"
)

// controllers are the exporter, the importer and the cluster's heartbeat on
// the broker: they run in one replica of the cluster at a time.
type controllers struct {
	o         *options
	local     *clients
	clusterID string

	sharedImports mcsinformers.SharedInformerFactory
	sharedSlices  informers.SharedInformerFactory

	exporterMetrics *exporter.Metrics
	importerMetrics *importer.Metrics

	exporter atomic.Pointer[exporter.Controller]
	importer atomic.Pointer[importer.Controller]
	leading  atomic.Bool
}

func newControllers(o *options, local *clients, clusterID string, reg prometheus.Registerer, dp *dataPlane) *controllers {
	c := &controllers{o: o, local: local, clusterID: clusterID}
	if dp != nil {
		// One cache of ServiceImports and MCS slices for the data plane
		// and the importer.
		c.sharedImports, c.sharedSlices = dp.imports, dp.slices
	}
	// Registered once, whatever the number of leadership terms.
	if o.runs(componentExporter) {
		c.exporterMetrics = exporter.NewMetrics(reg)
	}
	if o.runs(componentImporter) {
		c.importerMetrics = importer.NewMetrics(reg)
	}
	return c
}

// run joins the ClusterSet, claims this cluster's VIP blocks and runs the
// controllers and the heartbeat until ctx ends.
func (c *controllers) run(ctx context.Context) error {
	c.leading.Store(true)
	defer c.leading.Store(false)
	logger := klog.FromContext(ctx).WithValues("clusterID", c.clusterID)
	ctx = klog.NewContext(ctx, logger)

	brokerCfg, err := brokerConfig(ctx, c.o, c.local.kube)
	if err != nil {
		return err
	}
	// Clients with limiters of their own (see newClients): the exporter's
	// broker writes, the heartbeat, and each controller's local writes.
	brokerClients, err := newClients(brokerCfg, c.o.clientQPS, c.o.clientBurst)
	if err != nil {
		return fmt.Errorf("broker clients: %w", err)
	}
	heartbeatClients, err := newClients(brokerCfg, c.o.clientQPS, c.o.clientBurst)
	if err != nil {
		return fmt.Errorf("broker clients: %w", err)
	}
	// The importer's broker probe must not wait behind the exporter's
	// writes: a probe that times out means "the broker is down".
	importerBroker, err := newClients(brokerCfg, c.o.clientQPS, c.o.clientBurst)
	if err != nil {
		return fmt.Errorf("broker clients: %w", err)
	}
	exporterLocal, err := newClients(c.local.config, c.o.clientQPS, c.o.clientBurst)
	if err != nil {
		return fmt.Errorf("local cluster clients: %w", err)
	}
	importerLocal, err := newClients(c.local.config, c.o.clientQPS, c.o.clientBurst)
	if err != nil {
		return fmt.Errorf("local cluster clients: %w", err)
	}
	// The informers' connections wait at a gate the heartbeat opens and
	// closes: after a broker outage they resume with the heartbeat's first
	// success, not after client-go's retry backoff.
	gate := dialgate.New()
	watchCfg := rest.CopyConfig(brokerCfg)
	var dialer net.Dialer
	watchCfg.Dial = gate.Dial(dialer.DialContext)
	brokerWatch, err := newClients(watchCfg, c.o.clientQPS, c.o.clientBurst)
	if err != nil {
		return fmt.Errorf("broker clients: %w", err)
	}
	if err := clusterid.NewResolver(c.local.kube, c.local.dynamic).Join(ctx, c.o.clusterSet); err != nil {
		return fmt.Errorf("--clusterset: %w", err)
	}
	recorder, stopEvents := events.NewRecorder(c.local.kube, "mcsd")
	defer stopEvents()

	errc := make(chan error, 3)
	running := 0
	var exp *exporter.Controller
	if c.o.runs(componentExporter) {
		allocators, err := c.claimBlocks(ctx, brokerClients)
		if err != nil {
			return err
		}
		exp, err = exporter.New(exporter.Config{
			ClusterID:       c.clusterID,
			BrokerNamespace: c.o.brokerNamespace,
			Local:           exporterLocal.kube,
			LocalMCS:        exporterLocal.mcs,
			Broker:          brokerClients.kube,
			BrokerMCS:       brokerClients.mcs,
			BrokerWatch:     brokerWatch.kube,
			BrokerWatchMCS:  brokerWatch.mcs,
			ClusterSetIPs:   c.o.clusterSetIPs,
			Allocators:      allocators,
			ClusterSetCIDRs: c.o.clusterSetCIDRs,
			Recorder:        recorder,
			Metrics:         c.exporterMetrics,
			Workers:         c.o.exporterWorkers,
			ResyncPeriod:    c.o.controllerResync,
		})
		if err != nil {
			return err
		}
		c.exporter.Store(exp)
		defer c.exporter.Store(nil)
		running++
		go func() { errc <- exp.Run(ctx) }()
	}
	var imp *importer.Controller
	if c.o.runs(componentImporter) {
		imp, err = importer.New(importer.Config{
			ClusterID:             c.clusterID,
			BrokerNamespace:       c.o.brokerNamespace,
			Local:                 importerLocal.kube,
			LocalMCS:              importerLocal.mcs,
			Broker:                importerBroker.kube,
			BrokerMCS:             importerBroker.mcs,
			BrokerWatch:           brokerWatch.kube,
			BrokerWatchMCS:        brokerWatch.mcs,
			LivenessNamespace:     c.o.leaderElectNS,
			SharedImports:         c.sharedImports,
			SharedSlices:          c.sharedSlices,
			ClusterTTL:            c.o.clusterTTL,
			Recorder:              recorder,
			Metrics:               c.importerMetrics,
			Workers:               c.o.importerWorkers,
			ResyncPeriod:          c.o.controllerResync,
			ClusterSetCIDRs:       c.o.clusterSetCIDRs,
			DeniedNamespaces:      c.o.importDeniedNamespaces,
			MaxServicesPerCluster: c.o.maxServicesPerCluster,
			GoneClusterGrace:      c.o.goneClusterGrace,
			IPFamilies:            c.o.ipFamilies,
		})
		if err != nil {
			return err
		}
		c.importer.Store(imp)
		defer c.importer.Store(nil)
		running++
		go func() { errc <- imp.Run(ctx) }()
	}
	// The heartbeat says this cluster is alive; only a cluster that exports
	// has endpoints for others to drop, but an importing-only cluster's
	// Lease costs one write every few seconds and keeps the rule simple.
	// It is exporter.Heartbeat rather than component-helpers' lease
	// controller, which reports no successful renewal (the dial gate and
	// the broker conditions need each outcome), backs off inside one tick
	// and deletes the Lease at start and stop: README, "The heartbeat is
	// not component-helpers' lease controller".
	hb := &exporter.Heartbeat{
		Broker:    heartbeatClients.kube,
		Namespace: record.MemberNamespace(c.o.brokerNamespace, c.clusterID),
		Name:      record.LeaseName(c.clusterID),
		ClusterID: c.clusterID,
		Duration:  c.o.leaseDuration,
		Interval:  c.o.leaseDuration / 5,
		Version:   version.Get().Version,
		OnRenew: func(err error) {
			gate.Observe(err)
			if c.exporterMetrics != nil {
				c.exporterMetrics.ObserveLeaseRenewal(err)
			}
			if exp != nil {
				exp.ObserveBroker(err)
			}
			if imp != nil {
				imp.ObserveBroker(err)
			}
		},
	}
	running++
	go func() { hb.Run(ctx); errc <- nil }()
	logger.Info("Running controllers", "components", c.o.components, "broker", brokerCfg.Host, "brokerNamespace", c.o.brokerNamespace)

	var errs []error
	for ; running > 0; running-- {
		if err := <-errc; err != nil && ctx.Err() == nil {
			return err
		} else if err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// claimBlocks claims (or finds again) this cluster's VIP block of every
// clusterset range on the broker and returns an allocator per family.
func (c *controllers) claimBlocks(ctx context.Context, broker *clients) (map[corev1.IPFamily]*clustersetip.Allocator, error) {
	allocators := map[corev1.IPFamily]*clustersetip.Allocator{}
	if !c.o.clusterSetIPs {
		// A ServiceExport may still ask for a VIP by annotation: claim anyway.
		klog.FromContext(ctx).V(2).Info("ClusterSetIPs are off by default; claiming blocks for exports that turn them on")
	}
	claimer := clustersetip.Claimer{Kube: broker.kube, Namespace: c.o.brokerNamespace, ClusterID: c.clusterID}
	for _, set := range c.o.clusterSetCIDRs {
		v4 := set.Addr().Is4()
		requested, _ := prefixOfFamily(c.o.clusterVIPCIDRs, v4)
		block, err := claimer.Claim(ctx, set, requested, c.o.blockBits(v4))
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
		allocators[family] = clustersetip.NewAllocator(block)
		klog.FromContext(ctx).Info("Holding ClusterSetIP block", "family", family, "block", block)
	}
	return allocators, nil
}

// readyChecks say whether the controllers of this replica are synced; a
// replica that is not leading has nothing to be ready for.
func (c *controllers) readyChecks() []healthz.HealthChecker {
	var checks []healthz.HealthChecker
	if c.o.runs(componentExporter) {
		checks = append(checks, healthz.NamedCheck("exporter-synced", func(*http.Request) error {
			if e := c.exporter.Load(); c.leading.Load() && (e == nil || !e.Synced()) {
				return errors.New("exporter: caches not synced yet")
			}
			return nil
		}))
	}
	if c.o.runs(componentImporter) {
		checks = append(checks, healthz.NamedCheck("importer-synced", func(*http.Request) error {
			if i := c.importer.Load(); c.leading.Load() && (i == nil || !i.Synced()) {
				return errors.New("importer: caches not synced yet")
			}
			return nil
		}))
	}
	return checks
}
