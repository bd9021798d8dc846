package importer

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	kuberecord "k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
	mcsclient "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned"
	mcsinformers "sigs.k8s.io/mcs-api/pkg/client/informers/externalversions"
	mcslisters "sigs.k8s.io/mcs-api/pkg/client/listers/apis/v1beta1"

	"github.com/mcsd-io/mcsd/internal/record"
	"github.com/mcsd-io/mcsd/internal/sliceapply"
	"github.com/mcsd-io/mcsd/internal/trim"
	"github.com/mcsd-io/mcsd/internal/worker"
)

// EndpointSliceManager is the endpointslice.kubernetes.io/managed-by value
// of the MCS EndpointSlices the importer writes in member clusters. It is
// not the core controller's, so the EndpointSlice controller leaves them
// alone.
const EndpointSliceManager = "importer.mcsd.io"

// Config is what the importer needs. Clients of the broker read every
// cluster's records; clients of the local cluster write ServiceImports and
// EndpointSlices.
type Config struct {
	ClusterID       string
	BrokerNamespace string

	Local     kubernetes.Interface
	LocalMCS  mcsclient.Interface
	Broker    kubernetes.Interface
	BrokerMCS mcsclient.Interface
	// BrokerWatch and BrokerWatchMCS, when set, are the broker clients the
	// informers use (Broker and BrokerMCS otherwise). The daemon passes
	// clients whose new connections wait while its heartbeat cannot reach
	// the broker (internal/dialgate), so the informers resume as soon as
	// the broker answers again instead of after client-go's retry backoff.
	BrokerWatch    kubernetes.Interface
	BrokerWatchMCS mcsclient.Interface

	// ClusterTTL: a cluster whose broker Lease has not been renewed for
	// this long is gone (default 10 s).
	ClusterTTL time.Duration
	// Recorder gets an event for every change a user would want to see on
	// a ServiceImport (nil: events are dropped).
	Recorder kuberecord.EventRecorder
	// Metrics (nil: unregistered ones).
	Metrics *Metrics
	// Clock measures Lease ages (nil: the real clock).
	Clock clock.Clock
	// Workers is the number of services synced at once (default 4).
	Workers int
	// ResyncPeriod re-checks every service this often (default 10 min).
	ResyncPeriod time.Duration
	// LivenessNamespace is the namespace of this cluster that holds the
	// liveness ConfigMap (package liveness) the data plane filters on
	// (default mcsd-system). It must exist.
	LivenessNamespace string
	// CleanupRate is how many services a second are tidied after a
	// cluster is gone (default DefaultCleanupRate).
	CleanupRate float64

	// SharedImports and SharedSlices, when set, are informer factories of
	// the local cluster that the importer shares with the rest of its
	// process (mcsd's data plane) instead of caching the same objects
	// twice: every namespace's ServiceImports, and EndpointSlices selected
	// by SharedSliceSelector. Their owner sets their transforms (to
	// trim.ManagedFields) and starts them; the importer adds its indexes
	// and event handlers, and removes the handlers when it stops.
	SharedImports mcsinformers.SharedInformerFactory
	SharedSlices  informers.SharedInformerFactory

	// ClusterSetCIDRs are the clusterset's ClusterSetIP ranges (the
	// daemon's --clusterset-cidrs): a record's VIP outside them is
	// ignored. Empty: VIPs are checked against the block claims only.
	ClusterSetCIDRs []netip.Prefix
	// DeniedNamespaces are namespaces whose services are never imported
	// (nil: DefaultDeniedNamespaces; empty: none), besides
	// LivenessNamespace, which never is.
	DeniedNamespaces []string
	// DeniedServices are services, "<namespace>/<name>", never imported
	// (nil: DefaultDeniedServices; empty: none).
	DeniedServices []string
	// MaxServicesPerCluster is how many export records one cluster may
	// contribute; its newest beyond that are ignored (default
	// DefaultMaxServicesPerCluster).
	MaxServicesPerCluster int
	// GoneClusterGrace is how long the records of a dead cluster (or of a
	// cluster without a Lease) still count in merges (default
	// DefaultGoneClusterGrace).
	GoneClusterGrace time.Duration
	// LeaseClockSkew is how far behind this cluster's clock another
	// cluster's may be for its Lease, seen first, to count as live
	// (default DefaultLeaseClockSkew).
	LeaseClockSkew time.Duration
	// IPFamilies are the IP families this cluster serves (the daemon's
	// --ip-families). A service none of whose IP families is among them
	// is imported without ClusterSetIPs and EndpointSlices, so DNS and
	// the data plane have nothing for it, and its Ready condition is
	// False with reason IPFamilyNotSupported. Empty: every family is
	// served.
	IPFamilies []corev1.IPFamily
}

// DefaultDeniedNamespaces are the namespaces not imported when
// Config.DeniedNamespaces is nil: no member may place a ServiceImport or
// endpoints among the cluster's own system services. mcsd's own namespace
// (Config.LivenessNamespace) is never imported either.
var DefaultDeniedNamespaces = []string{"kube-system", "kube-public"}

// DefaultDeniedServices are the services ("<namespace>/<name>") not
// imported when Config.DeniedServices is nil: the API server's Service,
// whose name in clusterset DNS a member could otherwise answer with its own
// ClusterSetIP.
var DefaultDeniedServices = []string{"default/kubernetes"}

// SharedSliceSelector selects the EndpointSlices the importer writes, as a
// shared informer (Config.SharedSlices) must: its managed-by and both MCS
// labels, which the data plane selects on too.
var SharedSliceSelector = labels.SelectorFromSet(labels.Set{discoveryv1.LabelManagedBy: EndpointSliceManager}).String() +
	"," + mcsv1beta1.LabelServiceName + "," + mcsv1beta1.LabelSourceCluster

// DefaultLivenessNamespace is where the liveness ConfigMap goes when
// Config.LivenessNamespace is empty: the namespace mcsd's manifests run it in.
const DefaultLivenessNamespace = "mcsd-system"

// Indexes on the informers' caches, so one sync reads only its service's
// objects among tens of thousands.
const (
	// byService: broker records and EndpointSlices by "<namespace>/<name>"
	// of the service from their labels; local MCS EndpointSlices by
	// "<namespace>/<service-name label>".
	byService = "service"
	// byCluster: broker records by source cluster.
	byCluster = "cluster"
	// byServiceNamespace: broker records by the service's namespace.
	byServiceNamespace = "serviceNamespace"
	// byVIP: broker records by the ClusterSetIPs they hold, which the VIP
	// rule weighs against each other (clustersetip.Rule).
	byVIP = "vip"
)

// Controller imports the clusterset's services into this cluster.
type Controller struct {
	cfg Config

	brokerMCS    mcsinformers.SharedInformerFactory
	brokerSlices informers.SharedInformerFactory
	brokerLeases informers.SharedInformerFactory
	localKube    informers.SharedInformerFactory
	localSlices  informers.SharedInformerFactory
	localMCS     mcsinformers.SharedInformerFactory
	// brokerClaims, brokerDeclarations and brokerRules: ClusterSetIP block
	// claims, member declarations and export rules, the ConfigMaps the
	// trust checks read.
	brokerClaims       informers.SharedInformerFactory
	brokerDeclarations informers.SharedInformerFactory
	brokerRules        informers.SharedInformerFactory
	claims             cache.Store
	declarations       cache.Store
	rules              cache.Store

	records      cache.Indexer // broker export records
	remoteSlices cache.Indexer // broker EndpointSlices
	ownSlices    cache.Indexer // local MCS EndpointSlices written by the importer
	imports      mcslisters.ServiceImportLister
	namespaces   corelisters.NamespaceLister
	synced       []cache.InformerSynced

	// queue holds services ("<namespace>/<name>"); clusterQueue holds
	// cluster IDs whose liveness is due for reevaluation.
	queue        workqueue.TypedRateLimitingInterface[string]
	clusterQueue workqueue.TypedDelayingInterface[string]
	// capQueue holds clusters whose cap is due for reevaluation.
	capQueue workqueue.TypedDelayingInterface[string]

	// importCache and ownCache are the ServiceImport and own-slice caches
	// with the importer's own writes laid over them until the informers
	// catch up, so a sync right after a write neither re-creates nor
	// re-reads what it just wrote.
	importCache cache.MutationCache
	ownCache    cache.MutationCache

	book       *leaseBook
	broker     reachability
	probeNow   chan struct{}
	publishNow chan struct{}
	// shared are the handlers on informers the importer does not own.
	shared      []sharedHandler
	livenessRef atomic.Pointer[corev1.ConfigMap]
	cleanup     *pacer
	slices      sliceapply.Applier
	initialized chan struct{}

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

// New builds the importer; Run starts it.
func New(cfg Config) (*Controller, error) {
	if cfg.ClusterID == "" || cfg.BrokerNamespace == "" {
		return nil, fmt.Errorf("importer: cluster ID and broker namespace are required")
	}
	if cfg.Local == nil || cfg.LocalMCS == nil || cfg.Broker == nil || cfg.BrokerMCS == nil {
		return nil, fmt.Errorf("importer: clients of the local cluster and of the broker are required")
	}
	for i, f := range cfg.IPFamilies {
		if f != corev1.IPv4Protocol && f != corev1.IPv6Protocol {
			return nil, fmt.Errorf("importer: unknown IP family %q", f)
		}
		if slices.Contains(cfg.IPFamilies[:i], f) {
			return nil, fmt.Errorf("importer: IP family %s given twice", f)
		}
	}
	if cfg.ClusterTTL <= 0 {
		cfg.ClusterTTL = 10 * time.Second
	}
	if cfg.BrokerWatch == nil {
		cfg.BrokerWatch = cfg.Broker
	}
	if cfg.BrokerWatchMCS == nil {
		cfg.BrokerWatchMCS = cfg.BrokerMCS
	}
	if cfg.Workers <= 0 {
		cfg.Workers = 4
	}
	if cfg.ResyncPeriod <= 0 {
		cfg.ResyncPeriod = 10 * time.Minute
	}
	if cfg.LivenessNamespace == "" {
		cfg.LivenessNamespace = DefaultLivenessNamespace
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
	if cfg.GoneClusterGrace <= 0 {
		cfg.GoneClusterGrace = DefaultGoneClusterGrace
	}
	if cfg.LeaseClockSkew <= 0 {
		cfg.LeaseClockSkew = DefaultLeaseClockSkew
	}
	if cfg.Metrics == nil {
		cfg.Metrics = NewMetrics(nil)
	}
	if cfg.Recorder == nil {
		cfg.Recorder = &kuberecord.FakeRecorder{}
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	// The queues' delays follow the same clock as Lease ages when it can
	// drive them.
	queueClock, ok := cfg.Clock.(clock.WithTicker)
	if !ok {
		queueClock = clock.RealClock{}
	}
	c := &Controller{
		cfg: cfg,
		// Failures back off to at most 10 s apart; the broker coming back
		// resyncs everything at once anyway.
		queue:        worker.NewQueue("importer", queueClock),
		clusterQueue: workqueue.NewTypedDelayingQueueWithConfig(workqueue.TypedDelayingQueueConfig[string]{Name: "importer-clusters", Clock: queueClock}),
		book:         newLeaseBook(cfg.Clock, cfg.ClusterTTL, cfg.ClusterID),
		capQueue:     workqueue.NewTypedDelayingQueueWithConfig(workqueue.TypedDelayingQueueConfig[string]{Name: "importer-caps", Clock: queueClock}),
		probeNow:     make(chan struct{}, 1),
		publishNow:   make(chan struct{}, 1),
		initialized:  make(chan struct{}),
		trust:        &trust{clusterSet: cfg.ClusterSetCIDRs},
		undeclared:   map[string]bool{},
		caps:         newCapBook(cfg.MaxServicesPerCluster),
		denied:       map[string]bool{},
		rejected:     map[string]map[string]rejection{},
	}
	// mcsd's own namespace is never imported, whatever the denylist.
	for _, ns := range append(slices.Clone(cfg.DeniedNamespaces), cfg.LivenessNamespace) {
		c.denied[ns] = true
	}
	c.deniedServices = map[string]bool{}
	for _, key := range cfg.DeniedServices {
		c.deniedServices[key] = true
	}
	c.book.skew, c.book.grace = cfg.LeaseClockSkew, cfg.GoneClusterGrace
	c.cleanup = newPacer(cfg.CleanupRate, c.queue.Add)
	c.slices = c.sliceApplier()
	c.broker.lastContact = cfg.Clock.Now()

	inBroker := func(selector string) func(*metav1.ListOptions) {
		return func(o *metav1.ListOptions) { o.LabelSelector = selector }
	}
	// Broker: every cluster's records, slices and heartbeats, across the
	// members' namespaces, each kind selected by the labels its writer
	// puts on it (and kept only in its writer's namespace, see the
	// transforms below).
	c.brokerMCS = mcsinformers.NewSharedInformerFactoryWithOptions(cfg.BrokerWatchMCS, cfg.ResyncPeriod,
		mcsinformers.WithTweakListOptions(inBroker(record.LabelServiceNamespace)))
	c.brokerSlices = informers.NewSharedInformerFactoryWithOptions(cfg.BrokerWatch, cfg.ResyncPeriod,
		informers.WithTweakListOptions(inBroker(labels.SelectorFromSet(labels.Set{record.LabelManagedBy: record.EndpointSliceManager}).String()+","+record.LabelServiceNamespace)))
	c.brokerLeases = informers.NewSharedInformerFactoryWithOptions(cfg.BrokerWatch, cfg.ResyncPeriod,
		informers.WithTweakListOptions(inBroker(record.LabelSourceCluster)))
	// Local: namespaces (a service is imported where its namespace
	// exists), ServiceImports, and only the importer's own slices.
	c.localKube = informers.NewSharedInformerFactory(cfg.Local, cfg.ResyncPeriod)
	c.localSlices, c.localMCS = cfg.SharedSlices, cfg.SharedImports
	ownsLocal := c.localSlices == nil || c.localMCS == nil
	if ownsLocal {
		c.localSlices = informers.NewSharedInformerFactoryWithOptions(cfg.Local, cfg.ResyncPeriod,
			informers.WithTweakListOptions(inBroker(labels.SelectorFromSet(labels.Set{discoveryv1.LabelManagedBy: EndpointSliceManager}).String())))
		c.localMCS = mcsinformers.NewSharedInformerFactory(cfg.LocalMCS, cfg.ResyncPeriod)
	}

	recordInf := c.brokerMCS.Multicluster().V1beta1().ServiceImports().Informer()
	remoteSliceInf := c.brokerSlices.Discovery().V1().EndpointSlices().Informer()
	leaseInf := c.brokerLeases.Coordination().V1().Leases().Informer()
	nsInf := c.localKube.Core().V1().Namespaces()
	importInf := c.localMCS.Multicluster().V1beta1().ServiceImports()
	ownSliceInf := c.localSlices.Discovery().V1().EndpointSlices().Informer()

	if err := recordInf.AddIndexers(cache.Indexers{
		byService:          record.ServiceIndex,
		byCluster:          labelIndex(record.LabelSourceCluster),
		byServiceNamespace: labelIndex(record.LabelServiceNamespace),
		byVIP:              vipIndex,
	}); err != nil {
		return nil, err
	}
	if err := remoteSliceInf.AddIndexers(cache.Indexers{byService: record.ServiceIndex}); err != nil {
		return nil, err
	}
	if _, ok := ownSliceInf.GetIndexer().GetIndexers()[byService]; !ok {
		// A shared informer keeps the index of an earlier term.
		if err := ownSliceInf.AddIndexers(cache.Indexers{byService: localSliceServiceIndex}); err != nil {
			return nil, err
		}
	}
	for _, inf := range []cache.SharedIndexInformer{recordInf, remoteSliceInf, leaseInf} {
		if err := inf.SetWatchErrorHandlerWithContext(c.watchErrorHandler); err != nil {
			return nil, err
		}
	}
	// Records are kept decoded, not whole (record.Cached), other
	// clusters' slices for their endpoints only; an object outside its
	// writer's namespace is kept anonymous (record.OnlyMembers).
	if err := recordInf.SetTransform(record.OnlyMembers(cfg.BrokerNamespace, record.CacheTransform)); err != nil {
		return nil, err
	}
	if err := remoteSliceInf.SetTransform(record.OnlyMembers(cfg.BrokerNamespace, trim.RemoteEndpointSlice)); err != nil {
		return nil, err
	}
	if err := leaseInf.SetTransform(record.OnlyMembers(cfg.BrokerNamespace, trim.ManagedFields)); err != nil {
		return nil, err
	}
	transformed := []cache.SharedIndexInformer{nsInf.Informer()}
	if ownsLocal {
		transformed = append(transformed, importInf.Informer())
		if err := ownSliceInf.SetTransform(trimOwnSlice); err != nil {
			return nil, err
		}
	}
	for _, inf := range transformed {
		if err := inf.SetTransform(trim.ManagedFields); err != nil {
			return nil, err
		}
	}
	c.records, c.remoteSlices, c.ownSlices = recordInf.GetIndexer(), remoteSliceInf.GetIndexer(), ownSliceInf.GetIndexer()
	c.imports, c.namespaces = importInf.Lister(), nsInf.Lister()
	logger := klog.Background().WithName("importer")
	c.importCache = cache.NewIntegerResourceVersionMutationCache(logger, importInf.Informer().GetStore(), nil, mutationTTL, true)
	c.ownCache = cache.NewIntegerResourceVersionMutationCache(logger, ownSliceInf.GetStore(), ownSliceInf.GetIndexer(), mutationTTL, true)

	enqueueService := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { c.enqueueBrokerObject(obj) },
		UpdateFunc: func(_, obj any) { c.enqueueBrokerObject(obj) },
		DeleteFunc: func(obj any) { c.enqueueBrokerObject(obj) },
	}
	// One handler: the cap counts a record before its service is
	// enqueued, so the sync sees the count (handlers registered apart run
	// apart).
	if _, err := recordInf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			c.onRecordAdded(obj)
			c.enqueueBrokerObject(obj)
			c.enqueueVIPHolders(obj)
		},
		UpdateFunc: func(old, obj any) {
			c.enqueueBrokerObject(obj)
			c.enqueueVIPHolders(old, obj)
		},
		DeleteFunc: func(obj any) {
			c.onRecordDeleted(obj)
			c.enqueueBrokerObject(obj)
			c.enqueueVIPHolders(obj)
		},
	}); err != nil {
		return nil, err
	}
	if _, err := remoteSliceInf.AddEventHandler(enqueueService); err != nil {
		return nil, err
	}
	if _, err := leaseInf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { c.onLease(obj, false) },
		UpdateFunc: func(_, obj any) { c.onLease(obj, false) },
		DeleteFunc: func(obj any) { c.onLease(obj, true) },
	}); err != nil {
		return nil, err
	}
	if _, err := nsInf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { c.onNamespace(obj) },
		UpdateFunc: func(_, obj any) { c.onNamespace(obj) },
	}); err != nil {
		return nil, err
	}
	importReg, err := importInf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		// The importer's own status writes need no sync; a changed spec,
		// label or annotation (a hand edit, or its own write) does, and a
		// deleted ServiceImport is recreated while the service is exported.
		UpdateFunc: func(old, obj any) {
			o, n := old.(*mcsv1beta1.ServiceImport), obj.(*mcsv1beta1.ServiceImport)
			if o.Generation != n.Generation || !maps.Equal(o.Labels, n.Labels) || !maps.Equal(o.Annotations, n.Annotations) {
				c.enqueueLocalImport(obj)
			}
		},
		DeleteFunc: func(obj any) { c.enqueueLocalImport(obj) },
	})
	if err != nil {
		return nil, err
	}
	ownSliceReg, err := ownSliceInf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		// Edits and deletions by anyone else are repaired.
		UpdateFunc: func(_, obj any) { c.enqueueOwnSlice(obj) },
		DeleteFunc: func(obj any) { c.enqueueOwnSlice(obj) },
	})
	if err != nil {
		_ = importInf.Informer().RemoveEventHandler(importReg)
		return nil, err
	}
	if !ownsLocal {
		c.shared = []sharedHandler{{importInf.Informer(), importReg}, {ownSliceInf, ownSliceReg}}
	}
	c.synced = []cache.InformerSynced{
		recordInf.HasSynced, remoteSliceInf.HasSynced, leaseInf.HasSynced,
		nsInf.Informer().HasSynced, importReg.HasSynced, ownSliceReg.HasSynced,
	}
	if err := c.newTrustInformers(); err != nil {
		c.releaseShared()
		return nil, err
	}
	return c, nil
}

// Run imports until ctx ends. It waits for every cache, enqueues every
// service with a record and every ServiceImport or slice the importer
// wrote (so what was unexported while it was down goes), then syncs.
func (c *Controller) Run(ctx context.Context) error {
	defer utilruntime.HandleCrash()
	defer c.releaseShared()
	defer c.queue.ShutDown()
	defer c.clusterQueue.ShutDown()
	defer c.capQueue.ShutDown()
	logger := klog.FromContext(ctx)
	for _, f := range []interface{ Start(<-chan struct{}) }{c.brokerMCS, c.brokerSlices, c.brokerLeases, c.brokerClaims, c.brokerDeclarations, c.brokerRules, c.localKube, c.localSlices, c.localMCS} {
		f.Start(ctx.Done())
	}
	logger.Info("Starting importer", "clusterID", c.cfg.ClusterID, "brokerNamespace", c.cfg.BrokerNamespace, "clusterTTL", c.cfg.ClusterTTL)
	if !cache.WaitForCacheSync(ctx.Done(), c.synced...) {
		return fmt.Errorf("importer: caches did not sync: %w", ctx.Err())
	}
	// Clusters without a Lease are dead since now; the records of every
	// cluster are weighed, and the caps computed from every record, before
	// the first sync.
	c.book.start(c.cfg.Clock.Now())
	for _, cluster := range c.records.ListIndexFuncValues(byCluster) {
		c.evaluateCap(cluster)
		c.clusterQueue.Add(cluster)
	}
	close(c.initialized)
	c.cfg.Metrics.setBrokerReachable(true)
	c.resyncAll()
	c.requestPublish()
	go c.runProbe(ctx)
	go c.runPublisher(ctx)
	go c.cleanup.run(ctx)
	go wait.UntilWithContext(ctx, c.clusterWorker, time.Second)
	go wait.Until(c.capWorker, time.Second, ctx.Done())
	pool := &worker.Pool{Queue: c.queue, Sync: c.sync, Observe: c.cfg.Metrics.observeSync, What: "Importing service", Clock: c.cfg.Clock}
	pool.Run(ctx, c.cfg.Workers)
	<-ctx.Done()
	logger.Info("Stopping importer")
	return nil
}

// Synced reports whether the importer has its caches and started syncing.
func (c *Controller) Synced() bool {
	select {
	case <-c.initialized:
		return true
	default:
		return false
	}
}

// clusterWorker reevaluates clusters whose Lease changed or is due to
// expire, and resyncs their services when their liveness flips.
func (c *Controller) clusterWorker(ctx context.Context) {
	for {
		cluster, quit := c.clusterQueue.Get()
		if quit {
			return
		}
		c.syncCluster(ctx, cluster)
		c.clusterQueue.Done(cluster)
	}
}

func (c *Controller) syncCluster(ctx context.Context, cluster string) {
	logger := klog.FromContext(ctx)
	live, changed, known := c.book.transition(cluster)
	if changed {
		// The data plane acts on the published liveness; the services'
		// objects follow.
		c.requestPublish()
		keys := c.serviceKeysOfCluster(cluster)
		switch {
		case live:
			logger.Info("Cluster is live: its Lease is renewed", "cluster", cluster, "services", len(keys))
			if known {
				c.cfg.Recorder.Eventf(c.livenessObject(), corev1.EventTypeNormal, EventClusterBack,
					"Cluster %s is back: its broker Lease is renewed again; its endpoints of %d services are served again", cluster, len(keys))
			}
			// Its slices may have been cleaned up: restore them now.
			for _, key := range keys {
				c.queue.Add(key)
			}
		default:
			logger.Info("Cluster is gone: its Lease was not renewed within the TTL; its endpoints are no longer served", "cluster", cluster, "ttl", c.cfg.ClusterTTL, "services", len(keys))
			c.cfg.Metrics.clusterDropped(cluster)
			c.cfg.Recorder.Eventf(c.livenessObject(), corev1.EventTypeWarning, EventClusterLeft,
				"Cluster %s is gone: its broker Lease was not renewed within %s; its endpoints of %d services are no longer served until it renews", cluster, c.cfg.ClusterTTL, len(keys))
			c.cleanup.enqueue(keys)
		}
	}
	if pinned, changed := c.book.pinTransition(cluster); changed {
		keys := c.serviceKeysOfCluster(cluster)
		if pinned {
			logger.Info("Cluster's records count again in merges", "cluster", cluster, "services", len(keys))
		} else {
			logger.Info("Cluster is gone past the grace: its records no longer count in merges (type, ports, ClusterSetIPs)", "cluster", cluster, "grace", c.cfg.GoneClusterGrace, "services", len(keys))
			c.cfg.Metrics.ignoredRecord(ReasonClusterGonePastGrace, len(keys))
			c.cfg.Recorder.Eventf(c.livenessObject(), corev1.EventTypeWarning, EventClusterGonePastGrace,
				"Cluster %s has been gone for more than %s: its records of %d services no longer decide their type, ports or ClusterSetIPs until it renews its Lease", cluster, c.cfg.GoneClusterGrace, len(keys))
		}
		for _, key := range keys {
			c.queue.Add(key)
		}
	}
	if d, ok := c.book.nextChange(cluster); ok {
		// A little past the change, so the evaluation then sees it.
		c.clusterQueue.AddAfter(cluster, d+10*time.Millisecond)
	}
	c.cfg.Metrics.setLiveClusters(c.book.liveCount())
}

// onLease notes a heartbeat Lease's renewal or deletion and has its
// cluster reevaluated.
func (c *Controller) onLease(obj any, deleted bool) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	l, ok := obj.(*coordinationv1.Lease)
	if !ok {
		return
	}
	if !deleted {
		c.observeLease(l, "watch")
		return
	}
	if cluster, ok := leaseCluster(l); ok {
		c.book.forget(cluster)
		c.clusterQueue.Add(cluster)
	}
}

func (c *Controller) observeLease(l *coordinationv1.Lease, source string) {
	cluster, ok := leaseCluster(l)
	if !ok {
		return
	}
	v := versionOf(l)
	renewal := c.book.observe(cluster, v)
	klog.V(4).InfoS("Saw a heartbeat Lease", "cluster", cluster, "source", source, "renewTime", v.renew, "resourceVersion", l.ResourceVersion, "renewal", renewal)
	if renewal {
		c.clusterQueue.Add(cluster)
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
		c.enqueueBrokerObject(o)
	}
}

// enqueueBrokerObject enqueues the service a broker object belongs to.
func (c *Controller) enqueueBrokerObject(obj any) {
	keys, _ := record.ServiceIndex(obj)
	for _, k := range keys {
		c.queue.Add(k)
	}
}

func (c *Controller) enqueueLocalImport(obj any) {
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		utilruntime.HandleError(err)
		return
	}
	c.queue.Add(key)
}

func (c *Controller) enqueueOwnSlice(obj any) {
	keys, _ := localSliceServiceIndex(obj)
	for _, k := range keys {
		c.queue.Add(k)
	}
}

// serviceKeysOfCluster returns the services cluster exports.
func (c *Controller) serviceKeysOfCluster(cluster string) []string {
	objs, err := c.records.ByIndex(byCluster, cluster)
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

func localSliceServiceIndex(obj any) ([]string, error) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return nil, nil
	}
	name := m.GetLabels()[mcsv1beta1.LabelServiceName]
	if name == "" {
		return nil, nil
	}
	return []string{m.GetNamespace() + "/" + name}, nil
}

func labelIndex(label string) cache.IndexFunc {
	return func(obj any) ([]string, error) {
		m, err := meta.Accessor(obj)
		if err != nil {
			return nil, nil
		}
		if v := m.GetLabels()[label]; v != "" {
			return []string{v}, nil
		}
		return nil, nil
	}
}

// sharedHandler is an event handler on an informer the importer shares.
type sharedHandler struct {
	informer     cache.SharedIndexInformer
	registration cache.ResourceEventHandlerRegistration
}

// releaseShared removes the importer's handlers from shared informers,
// which outlive it.
func (c *Controller) releaseShared() {
	for _, h := range c.shared {
		_ = h.informer.RemoveEventHandler(h.registration)
	}
}
