package importer

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
	mcslisters "sigs.k8s.io/mcs-api/pkg/client/listers/apis/v1beta1"

	"github.com/mcsd-io/mcsd/internal/caches"
	"github.com/mcsd-io/mcsd/internal/controller"
	"github.com/mcsd-io/mcsd/internal/record"
	"github.com/mcsd-io/mcsd/internal/sliceapply"
	"github.com/mcsd-io/mcsd/liveness"
)

// Config is what the importer needs besides its informers. Shared's Local
// clients write ServiceImports and EndpointSlices; the importer writes
// nothing to the broker.
type Config struct {
	controller.Shared

	// Liveness says which clusters are live, whose records count, and
	// whether the broker answers (a liveness.Controller).
	Liveness Liveness
	// ClusterTTL is the liveness TTL, said in the Ready condition of a
	// service no live cluster exports (default liveness.DefaultTTL).
	ClusterTTL time.Duration
	// Metrics (nil: unregistered ones).
	Metrics *Metrics
	// CleanupRate is how many services a second are tidied after a
	// cluster is gone (default DefaultCleanupRate).
	CleanupRate float64

	// ClusterSetCIDRs are the clusterset's ClusterSetIP ranges (the
	// daemon's --clusterset-cidrs): a record's VIP outside them is
	// ignored. Empty: VIPs are checked against the block claims only.
	ClusterSetCIDRs []netip.Prefix
	// DeniedNamespaces are namespaces whose services are never imported
	// (nil: DefaultDeniedNamespaces; empty: none), besides mcsd's own
	// namespace (the one of Liveness's ConfigMap), which never is.
	DeniedNamespaces []string
	// DeniedServices are services, "<namespace>/<name>", never imported
	// (nil: DefaultDeniedServices; empty: none).
	DeniedServices []string
	// MaxServicesPerCluster is how many export records one cluster may
	// contribute; its newest beyond that are ignored (default
	// DefaultMaxServicesPerCluster).
	MaxServicesPerCluster int
	// IPFamilies are the IP families this cluster serves (the daemon's
	// --ip-families). A service none of whose IP families is among them
	// is imported without ClusterSetIPs and EndpointSlices, so DNS and
	// the data plane have nothing for it, and its Ready condition is
	// False with reason IPFamilyNotSupported. Empty: every family is
	// served.
	IPFamilies []corev1.IPFamily
}

// Liveness is what the importer asks of cluster liveness, which package
// liveness's Controller owns: whether a cluster's endpoints are served,
// whether its records count in merges, whether the broker answers; and it
// is told of every transition, to resync or tidy the cluster's services.
type Liveness interface {
	Live(cluster string) bool
	Pinned(cluster string) bool
	BrokerDown() (lastContact time.Time, down bool)
	OnTransition(fn func(liveness.Transition))
	// HasSynced: the importer syncs nothing before liveness is known, or
	// every cluster would look gone.
	HasSynced() bool
	// Object is what Events about the clusterset are about (its
	// ConfigMap).
	Object() *corev1.ConfigMap
}

// DefaultDeniedNamespaces are the namespaces not imported when
// Config.DeniedNamespaces is nil: no member may place a ServiceImport or
// endpoints among the cluster's own system services. mcsd's own namespace
// (the one of the liveness ConfigMap) is never imported either.
var DefaultDeniedNamespaces = []string{"kube-system", "kube-public"}

// DefaultDeniedServices are the services ("<namespace>/<name>") not
// imported when Config.DeniedServices is nil: the API server's Service,
// whose name in clusterset DNS a member could otherwise answer with its own
// ClusterSetIP.
var DefaultDeniedServices = []string{"default/kubernetes"}

// Indexes on the informers' caches, so one sync reads only its service's
// objects among tens of thousands.
const (
	// byService: broker records and EndpointSlices by "<namespace>/<name>"
	// of the service from their labels; local MCS EndpointSlices by
	// "<namespace>/<service-name label>".
	byService = record.IndexByService
	// byServiceNamespace: broker records by the service's namespace.
	byServiceNamespace = "serviceNamespace"
	// byVIP: broker records by the ClusterSetIPs they hold, which the VIP
	// rule weighs against each other (vipalloc.Rule).
	byVIP = "vip"
)

// Controller imports the clusterset's services into this cluster.
type Controller struct {
	*controller.Base
	cfg  Config
	live Liveness

	records      cache.Indexer // broker export records, decoded
	remoteSlices cache.Indexer // broker EndpointSlices
	ownSlices    cache.Indexer // local MCS EndpointSlices written by the importer
	imports      mcslisters.ServiceImportLister
	namespaces   corelisters.NamespaceLister
	// claims, declarations and rules: ClusterSetIP block claims, member
	// declarations and export rules, the ConfigMaps the trust checks read.
	claims       cache.Store
	declarations cache.Store
	rules        cache.Store

	// capQueue holds clusters whose cap is due for reevaluation.
	capQueue workqueue.TypedDelayingInterface[string]
	// importCache and ownCache are the ServiceImport and own-slice caches
	// with the importer's own writes laid over them until the informers
	// catch up, so a sync right after a write neither re-creates nor
	// re-reads what it just wrote.
	importCache cache.MutationCache
	ownCache    cache.MutationCache
	cleanup     *pacer
	slices      sliceapply.Applier

	trust *trust
	// undeclared are the clusters said to have no declaration (guarded by
	// trust.mu).
	undeclared map[string]bool
	caps       *capBook
	denied     map[string]bool
	// deniedServices are "<namespace>/<name>" keys never imported.
	deniedServices map[string]bool
	// rejected is, per service, what the last sync refused of its
	// records, so each refusal is counted, logged and told once.
	rejectedMu sync.Mutex
	rejected   map[string]map[string]rejection
}

// mutationTTL is how long a write is laid over the caches: far longer than
// a watch takes to deliver it.
const mutationTTL = time.Minute

// New builds the importer on informers of the local cluster and the
// broker, which it adds its indexes and event handlers to; Run starts it
// once their owner has started them and liveness is known.
func New(cfg Config, local *caches.Local, broker *caches.Broker) (*Controller, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	base, err := controller.NewBase("importer", cfg.Shared, cfg.Metrics.Metrics)
	if err != nil {
		return nil, err
	}
	cfg.Shared = base.Shared
	c := &Controller{
		Base:       base,
		cfg:        cfg,
		live:       cfg.Liveness,
		capQueue:   workqueue.NewTypedDelayingQueueWithConfig(workqueue.TypedDelayingQueueConfig[string]{Name: "importer-caps", Clock: cfg.Clock}),
		trust:      &trust{clusterSet: cfg.ClusterSetCIDRs},
		undeclared: map[string]bool{},
		caps:       newCapBook(cfg.MaxServicesPerCluster),
		denied:     map[string]bool{},
		rejected:   map[string]map[string]rejection{},
	}
	c.denyImports()
	c.cleanup = newPacer(cfg.CleanupRate, c.Queue.Add)
	c.slices = c.sliceApplier()
	records, remoteSlices, claims, decls, rules := broker.Records(), broker.Slices(), broker.Claims(), broker.Declarations(), broker.ExportRules()
	imports, ownSlices, namespaces := local.Imports(), local.MCSSlices(), local.Namespaces()
	if err := c.index(records, remoteSlices, ownSlices); err != nil {
		return nil, err
	}
	c.records, c.remoteSlices, c.ownSlices = records.GetIndexer(), remoteSlices.GetIndexer(), ownSlices.GetIndexer()
	c.claims, c.declarations, c.rules = claims.GetStore(), decls.GetStore(), rules.GetStore()
	c.imports = mcslisters.NewServiceImportLister(imports.GetIndexer())
	c.namespaces = corelisters.NewNamespaceLister(namespaces.GetIndexer())
	logger := klog.Background().WithName("importer")
	c.importCache = cache.NewIntegerResourceVersionMutationCache(logger, imports.GetStore(), nil, mutationTTL, true)
	c.ownCache = cache.NewIntegerResourceVersionMutationCache(logger, ownSlices.GetStore(), ownSlices.GetIndexer(), mutationTTL, true)
	err = errors.Join(
		c.Handle(records, c.recordHandler()),
		c.Handle(remoteSlices, controller.OnAny(c.EnqueueService)),
		c.Handle(namespaces, cache.ResourceEventHandlerFuncs{
			AddFunc:    c.onNamespace,
			UpdateFunc: func(_, obj any) { c.onNamespace(obj) },
		}),
		c.Handle(imports, c.importHandler()),
		// Edits and deletions by anyone else are repaired.
		c.Handle(ownSlices, cache.ResourceEventHandlerFuncs{
			UpdateFunc: func(_, obj any) { c.enqueueOwnSlice(obj) },
			DeleteFunc: c.enqueueOwnSlice,
		}),
		c.Handle(claims, controller.OnAny(func(any) { c.claimsChanged() })),
		c.Handle(decls, controller.OnAny(func(any) { c.declarationsChanged() })),
		c.Handle(rules, controller.OnAny(func(any) { c.rulesChanged() })),
	)
	if err != nil {
		c.Release()
		return nil, err
	}
	c.WaitFor(c.live.HasSynced)
	c.live.OnTransition(c.onTransition)
	return c, nil
}

// withDefaults fills in cfg's defaults and checks what has none.
func (cfg Config) withDefaults() (Config, error) {
	if cfg.Liveness == nil {
		return cfg, errors.New("importer: liveness is required")
	}
	for i, f := range cfg.IPFamilies {
		if f != corev1.IPv4Protocol && f != corev1.IPv6Protocol {
			return cfg, fmt.Errorf("importer: unknown IP family %q", f)
		}
		if slices.Contains(cfg.IPFamilies[:i], f) {
			return cfg, fmt.Errorf("importer: IP family %s given twice", f)
		}
	}
	if cfg.ClusterTTL <= 0 {
		cfg.ClusterTTL = liveness.DefaultTTL
	}
	if cfg.CleanupRate <= 0 {
		cfg.CleanupRate = DefaultCleanupRate
	}
	if cfg.DeniedNamespaces == nil {
		cfg.DeniedNamespaces = DefaultDeniedNamespaces
	}
	if cfg.DeniedServices == nil {
		cfg.DeniedServices = DefaultDeniedServices
	}
	if cfg.MaxServicesPerCluster <= 0 {
		cfg.MaxServicesPerCluster = DefaultMaxServicesPerCluster
	}
	if cfg.Metrics == nil {
		cfg.Metrics = NewMetrics(nil)
	}
	return cfg, nil
}

// denyImports fills the denylists: the namespaces and services never
// imported, mcsd's own namespace (its liveness ConfigMap's) whatever
// Config.DeniedNamespaces says.
func (c *Controller) denyImports() {
	for _, ns := range append(slices.Clone(c.cfg.DeniedNamespaces), c.live.Object().Namespace) {
		c.denied[ns] = true
	}
	c.deniedServices = map[string]bool{}
	for _, key := range c.cfg.DeniedServices {
		c.deniedServices[key] = true
	}
}

// index adds the importer's indexes to its informers, those it shares
// included (an informer that outlives a leadership term keeps them).
func (c *Controller) index(records, remoteSlices, ownSlices cache.SharedIndexInformer) error {
	return errors.Join(
		controller.AddIndex(records, byService, record.ServiceIndex),
		controller.AddIndex(records, record.IndexByCluster, record.ClusterIndex),
		controller.AddIndex(records, byServiceNamespace, record.LabelIndex(record.LabelServiceNamespace)),
		controller.AddIndex(records, byVIP, vipIndex),
		controller.AddIndex(remoteSlices, byService, record.ServiceIndex),
		controller.AddIndex(ownSlices, byService, mcsSliceIndex),
	)
}

// recordHandler counts a record for its cluster's cap before its service
// is enqueued, in one handler, so that the sync sees the count (handlers
// registered apart run apart), and resyncs the services holding its VIPs.
func (c *Controller) recordHandler() cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			c.onRecordAdded(obj)
			c.EnqueueService(obj)
			c.enqueueVIPHolders(obj)
		},
		UpdateFunc: func(old, obj any) {
			c.EnqueueService(obj)
			c.enqueueVIPHolders(old, obj)
		},
		DeleteFunc: func(obj any) {
			c.onRecordDeleted(obj)
			c.EnqueueService(obj)
			c.enqueueVIPHolders(obj)
		},
	}
}

// importHandler resyncs a service whose ServiceImport changed in what the
// importer owns: its own status writes need no sync; a changed spec, label
// or annotation (a hand edit, or its own write) does, and a deleted
// ServiceImport is recreated while the service is exported.
func (c *Controller) importHandler() cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(old, obj any) {
			o, n := old.(*mcsv1beta1.ServiceImport), obj.(*mcsv1beta1.ServiceImport)
			if o.Generation != n.Generation || !maps.Equal(o.Labels, n.Labels) || !maps.Equal(o.Annotations, n.Annotations) {
				c.EnqueueObject(obj)
			}
		},
		DeleteFunc: c.EnqueueObject,
	}
}

// Run imports until ctx ends. It waits for every cache and for liveness,
// enqueues every service with a record and every ServiceImport or slice
// the importer wrote (so what was unexported while it was down goes), then
// syncs.
func (c *Controller) Run(ctx context.Context) error {
	defer c.capQueue.ShutDown()
	klog.FromContext(ctx).Info("Starting importer", "clusterID", c.cfg.ClusterID, "brokerNamespace", c.cfg.BrokerNamespace, "clusterTTL", c.cfg.ClusterTTL)
	return c.Base.Run(ctx, "Importing service", func(ctx context.Context) error {
		// The caps are computed from every record before the first sync.
		for _, cluster := range c.records.ListIndexFuncValues(record.IndexByCluster) {
			c.evaluateCap(cluster)
		}
		c.resyncAll()
		go c.cleanup.run(ctx)
		go wait.Until(c.capWorker, time.Second, ctx.Done())
		return nil
	}, c.sync)
}

// onTransition resyncs the services of a cluster whose liveness or
// standing in merges changed, or tidies them up at the cleanup rate when
// it is gone (the data plane stopped serving its endpoints already), and
// every service when the broker answers again.
func (c *Controller) onTransition(t liveness.Transition) {
	switch t.Kind {
	case liveness.ClusterGone:
		c.cleanup.enqueue(c.serviceKeysOfCluster(t.Cluster))
	case liveness.ClusterUnpinned:
		keys := c.serviceKeysOfCluster(t.Cluster)
		c.cfg.Metrics.ignoredRecord(ReasonClusterGonePastGrace, len(keys))
		c.enqueue(keys)
	case liveness.ClusterLive, liveness.ClusterPinned:
		// Its slices may have been cleaned up: restore them now.
		c.enqueue(c.serviceKeysOfCluster(t.Cluster))
	case liveness.BrokerBack:
		c.resyncAll()
	}
}

func (c *Controller) enqueue(keys []string) {
	for _, key := range keys {
		c.Queue.Add(key)
	}
}

// resyncAll enqueues every service the importer knows of.
func (c *Controller) resyncAll() {
	if c.Synced() {
		c.enqueue(c.allServiceKeys())
	}
}

// onNamespace imports the services of a namespace that appeared.
func (c *Controller) onNamespace(obj any) {
	ns, ok := obj.(*corev1.Namespace)
	if !ok || !namespaceUsable(ns) {
		return
	}
	objs, err := c.records.ByIndex(byServiceNamespace, ns.Name)
	if err != nil {
		return
	}
	for _, o := range objs {
		c.EnqueueService(o)
	}
}

func (c *Controller) enqueueOwnSlice(obj any) {
	keys, _ := mcsSliceIndex(obj)
	for _, k := range keys {
		c.Queue.Add(k)
	}
}

// serviceKeysOfCluster returns the services cluster exports.
func (c *Controller) serviceKeysOfCluster(cluster string) []string {
	objs, err := c.records.ByIndex(record.IndexByCluster, cluster)
	if err != nil {
		return nil
	}
	var keys []string
	for _, o := range objs {
		k, _ := record.ServiceIndex(o)
		keys = append(keys, k...)
	}
	return keys
}

// allServiceKeys returns every service with a broker record, and every
// service of a ServiceImport or slice the importer wrote.
func (c *Controller) allServiceKeys() []string {
	seen := map[string]bool{}
	for _, k := range c.records.ListIndexFuncValues(byService) {
		seen[k] = true
	}
	for _, k := range c.ownSlices.ListIndexFuncValues(byService) {
		seen[k] = true
	}
	if imports, err := c.imports.List(labels.Everything()); err == nil {
		for _, si := range imports {
			if managed(si) {
				seen[si.Namespace+"/"+si.Name] = true
			}
		}
	}
	return slices.Sorted(maps.Keys(seen))
}

// mcsSliceIndex indexes the importer's MCS EndpointSlices by their
// service, "<namespace>/<multicluster.kubernetes.io/service-name>".
var mcsSliceIndex = record.NamespacedLabelIndex(mcsv1beta1.LabelServiceName)
