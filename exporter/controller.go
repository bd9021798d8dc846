package exporter

import (
	"context"
	"errors"
	"maps"
	"net/netip"
	"sync"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/labels"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
	mcslisters "sigs.k8s.io/mcs-api/pkg/client/listers/apis/v1beta1"

	"github.com/mcsd-io/mcsd/broker"
	"github.com/mcsd-io/mcsd/internal/cacheobj"
	"github.com/mcsd-io/mcsd/internal/caches"
	"github.com/mcsd-io/mcsd/internal/controller"
	"github.com/mcsd-io/mcsd/internal/record"
	"github.com/mcsd-io/mcsd/internal/sliceapply"
	"github.com/mcsd-io/mcsd/vipalloc"
)

// Config is what the exporter needs besides its informers. Shared's Local
// clients read exports and write their status; its Broker clients write
// this cluster's records and slices in its own member namespace
// (Shared.MemberNamespace); the claims and export rules it weighs them by
// are in Shared.BrokerNamespace.
type Config struct {
	controller.Shared

	// ClusterSetIPs is the default for exports without the
	// AnnotationClusterSetIP annotation.
	ClusterSetIPs bool
	// Allocators hand out VIPs from this cluster's claimed blocks, per IP
	// family; a family without one gets no VIPs.
	Allocators map[corev1.IPFamily]*vipalloc.Allocator
	// ClusterSetCIDRs are the clusterset ranges (mcsd's
	// --clusterset-cidrs). The exporter weighs other clusters' VIPs as the
	// importers do (vipalloc.Rule), so it never copies one they refuse;
	// empty means any range.
	ClusterSetCIDRs []netip.Prefix
	// Metrics (nil: unregistered ones).
	Metrics *Metrics
}

// AnnotationClusterSetIP on a ServiceExport turns its VIP on ("true") or off
// ("false") regardless of the cluster's default.
const AnnotationClusterSetIP = "mcsd.io/clusterset-ip"

// Controller reconciles ServiceExports with the broker.
type Controller struct {
	*controller.Base
	cfg Config

	exports  mcslisters.ServiceExportLister
	services corelisters.ServiceLister
	// claims are the ClusterSetIP block claims of every cluster, rules
	// the broker's export rules.
	claims cache.Store
	rules  cache.Store
	// Indexes by service, so that one service's sync reads its own objects
	// instead of scanning every object of the namespace or broker: the
	// core controller's EndpointSlices, every cluster's records, and this
	// cluster's broker EndpointSlices.
	sliceIndex    cache.Indexer
	recordIndex   cache.Indexer
	ownSliceIndex cache.Indexer
	vips          *vipBook
	applier       sliceapply.Applier

	brokerMu   sync.Mutex
	brokerDown bool

	// memberNamespace is where this cluster writes on the broker.
	memberNamespace string
}

// New builds the exporter on informers of the local cluster and the
// broker, which it adds its indexes and event handlers to; Run starts it
// once their owner has started them.
func New(cfg Config, local *caches.Local, broker *caches.Broker) (*Controller, error) {
	if cfg.Metrics == nil {
		cfg.Metrics = NewMetrics(nil)
	}
	base, err := controller.NewBase("exporter", cfg.Shared, cfg.Metrics.Metrics)
	if err != nil {
		return nil, err
	}
	cfg.Shared = base.Shared
	c := &Controller{Base: base, cfg: cfg, memberNamespace: cfg.MemberNamespace()}
	c.vips = newVIPBook(cfg.Allocators, c.vipRule)
	c.applier = c.sliceApplier()
	exports, services, slices := local.Exports(), local.Services(), local.EndpointSlices()
	records, ownSlices, claims, rules := broker.RecordObjects(), broker.OwnSlices(), broker.Claims(), broker.ExportRules()
	c.exports = mcslisters.NewServiceExportLister(exports.GetIndexer())
	c.services = corelisters.NewServiceLister(services.GetIndexer())
	c.claims, c.rules = claims.GetStore(), rules.GetStore()
	c.sliceIndex, c.recordIndex, c.ownSliceIndex = slices.GetIndexer(), records.GetIndexer(), ownSlices.GetIndexer()
	if err := controller.AddIndex(slices, record.IndexByService, coreSliceIndex); err != nil {
		return nil, err
	}
	for _, inf := range []cache.SharedIndexInformer{records, ownSlices} {
		if err := controller.AddIndex(inf, record.IndexByService, record.ServiceIndex); err != nil {
			return nil, err
		}
	}
	err = errors.Join(
		c.Handle(services, controller.OnAny(c.EnqueueObject)),
		c.Handle(exports, cache.ResourceEventHandlerFuncs{
			AddFunc: c.EnqueueObject,
			// The exporter's own status writes must not trigger another sync.
			UpdateFunc: func(old, obj any) {
				o, n := old.(*mcsv1beta1.ServiceExport), obj.(*mcsv1beta1.ServiceExport)
				if o.Generation != n.Generation || !maps.Equal(o.Annotations, n.Annotations) || n.DeletionTimestamp != nil {
					c.EnqueueObject(obj)
				}
			},
			DeleteFunc: c.EnqueueObject,
		}),
		c.Handle(slices, controller.OnAny(c.enqueueLocalSlice)),
		// The VIP book learns every cluster's VIPs from this handler, so
		// the exporter waits for it to have seen the initial list, not
		// only for the cache to hold it: else a restarted exporter could
		// hand out a VIP its book has not seen yet.
		c.Handle(records, cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { c.onRecord(nil, obj) },
			UpdateFunc: c.onRecord,
			DeleteFunc: func(obj any) { c.onRecord(obj, nil) },
		}),
		// Someone else changing or deleting this cluster's slices is
		// repaired; a slice that appears (made elsewhere, or left from
		// before and seen late) is checked too.
		c.Handle(ownSlices, controller.OnAny(c.EnqueueService)),
		// A claim coming or going changes which VIPs records may hold:
		// every export is weighed again.
		c.Handle(claims, controller.OnAny(func(any) { c.resyncAll() })),
		// A rule coming, changing or going changes whose records count.
		c.Handle(rules, controller.OnAny(func(any) { c.resyncAll() })),
	)
	if err != nil {
		c.Release()
		return nil, err
	}
	return c, nil
}

// Run syncs until ctx ends. It first waits for every cache, then enqueues
// the services of this cluster's existing broker records and slices, so
// exports deleted while the exporter was down are withdrawn.
func (c *Controller) Run(ctx context.Context) error {
	klog.FromContext(ctx).Info("Starting exporter", "clusterID", c.cfg.ClusterID, "brokerNamespace", c.cfg.BrokerNamespace, "memberNamespace", c.memberNamespace)
	return c.Base.Run(ctx, "Syncing export", func(context.Context) error {
		c.enqueueOwnRecords()
		for _, s := range c.ownSliceIndex.List() {
			c.EnqueueService(s)
		}
		return nil
	}, c.sync)
}

// enqueueOwnRecords enqueues the services of this cluster's records.
func (c *Controller) enqueueOwnRecords() {
	own, _ := mcslisters.NewServiceImportLister(c.recordIndex).ServiceImports(c.memberNamespace).List(record.ClusterSelector(c.cfg.ClusterID))
	for _, r := range own {
		c.EnqueueService(r)
	}
}

// ObserveBroker is told whether the broker answered (the heartbeat's
// OnRenew): when it answers again after failing, every export is synced at
// once instead of waiting out its retry backoff.
func (c *Controller) ObserveBroker(err error) {
	c.brokerMu.Lock()
	recovered := c.brokerDown && err == nil
	c.brokerDown = err != nil
	c.brokerMu.Unlock()
	if !recovered || !c.Synced() {
		return
	}
	exports, lerr := c.exports.List(labels.Everything())
	if lerr != nil {
		return
	}
	c.cfg.Logger.Info("The broker answers again; syncing every export", "exports", len(exports))
	for _, se := range exports {
		c.Queue.Add(se.Namespace + "/" + se.Name)
	}
	c.enqueueOwnRecords()
}

// sliceApplier writes this cluster's broker slices, counting its writes.
func (c *Controller) sliceApplier() sliceapply.Applier {
	return sliceapply.Applier{Client: c.cfg.Broker, What: "broker EndpointSlice", UpToDate: sliceUpToDate, Update: sliceUpdate, Metrics: c.Metrics}
}

// exportRules are the broker's export rules as they stand now.
func (c *Controller) exportRules() broker.ExportRules {
	var cms []*corev1.ConfigMap
	for _, o := range c.rules.List() {
		if cm, ok := o.(*corev1.ConfigMap); ok {
			cms = append(cms, cm)
		}
	}
	return broker.ParseExportRules(cms)
}

// vipRule is the VIP rule as the claims on the broker stand now.
func (c *Controller) vipRule() vipalloc.Rule {
	claims, _ := vipalloc.ParseClaims(c.claims.List())
	return vipalloc.Rule{ClusterSet: c.cfg.ClusterSetCIDRs, Owners: vipalloc.Owners(claims)}
}

// resyncAll queues every export of this cluster, once the exporter runs.
func (c *Controller) resyncAll() {
	if !c.Synced() {
		return
	}
	exports, err := c.exports.List(labels.Everything())
	if err != nil {
		return
	}
	for _, se := range exports {
		c.Queue.Add(se.Namespace + "/" + se.Name)
	}
}

// enqueueLocalSlice enqueues the Service of one of the core controller's
// EndpointSlices.
func (c *Controller) enqueueLocalSlice(obj any) {
	keys, _ := coreSliceIndex(obj)
	for _, k := range keys {
		c.Queue.Add(k)
	}
}

// coreSliceIndex indexes the core controller's EndpointSlices by the
// Service they belong to; never mcsd's imported ones, which have no
// kubernetes.io/service-name label.
var coreSliceIndex = record.NamespacedLabelIndex(discoveryv1.LabelServiceName)

// onRecord keeps the VIP book current and re-syncs the service: another
// cluster's change can raise or clear this cluster's conflicts. The
// services holding the record's VIPs are re-synced too: one service taking
// or letting go of an address changes whether another may hold it.
func (c *Controller) onRecord(old, cur any) {
	o, _ := cacheobj.Object[*mcsv1beta1.ServiceImport](old)
	n, _ := cacheobj.Object[*mcsv1beta1.ServiceImport](cur)
	var oldVIPs, curVIPs []string
	latest := n
	if o != nil {
		oldVIPs = o.Spec.IPs
	}
	if n != nil {
		curVIPs = n.Spec.IPs
	} else {
		latest = o
	}
	if latest == nil {
		return
	}
	c.vips.observe(latest.Name, holdingOf(latest), oldVIPs, curVIPs)
	c.EnqueueService(latest)
	for _, v := range append(oldVIPs, curVIPs...) {
		ip, err := netip.ParseAddr(v)
		if err != nil {
			continue
		}
		for _, h := range c.vips.holdersOf(ip) {
			c.Queue.Add(h.Service)
		}
	}
}

// holdingOf is a broker record's hold on its VIPs, read from its labels and
// precedence alone: every record of the clusterset passes here, and most
// hold no VIP this exporter weighs.
func holdingOf(si *mcsv1beta1.ServiceImport) vipalloc.Holding {
	return vipalloc.Holding{
		Cluster: si.Labels[record.LabelSourceCluster],
		Service: record.ServiceKey(si.Labels[record.LabelServiceNamespace], si.Labels[record.LabelServiceName]),
		Created: record.Precedence(si).Time,
	}
}
