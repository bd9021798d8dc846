package exporter

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	discoverylisters "k8s.io/client-go/listers/discovery/v1"
	"k8s.io/client-go/tools/cache"
	kuberecord "k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
	mcsclient "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned"
	mcsinformers "sigs.k8s.io/mcs-api/pkg/client/informers/externalversions"
	mcslisters "sigs.k8s.io/mcs-api/pkg/client/listers/apis/v1beta1"

	"github.com/mcsd-io/mcsd/broker"
	"github.com/mcsd-io/mcsd/clustersetip"
	"github.com/mcsd-io/mcsd/internal/record"
	"github.com/mcsd-io/mcsd/internal/sliceapply"
	"github.com/mcsd-io/mcsd/internal/trim"
	"github.com/mcsd-io/mcsd/internal/worker"
)

// Config is what the exporter needs. Clients of the local cluster read
// exports and write their status; clients of the broker write this
// cluster's records.
//
// BrokerNamespace is the broker namespace, where the claims and the export
// rules are; this cluster writes in its own namespace,
// record.MemberNamespace(BrokerNamespace, ClusterID), and reads every
// cluster's records across theirs.
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

	// ClusterSetIPs is the default for exports without the
	// AnnotationClusterSetIP annotation.
	ClusterSetIPs bool
	// Allocators hand out VIPs from this cluster's claimed blocks, per IP
	// family; a family without one gets no VIPs.
	Allocators map[corev1.IPFamily]*clustersetip.Allocator
	// ClusterSetCIDRs are the clusterset ranges (mcsd's
	// --clusterset-cidrs). The exporter weighs other clusters' VIPs as the
	// importers do (clustersetip.Rule), so it never copies one they refuse;
	// empty means any range.
	ClusterSetCIDRs []netip.Prefix

	Recorder kuberecord.EventRecorder
	Metrics  *Metrics
	// Workers is the number of services synced at once (default 4).
	Workers int
	// ResyncPeriod re-checks every export this often (default 10 min).
	ResyncPeriod time.Duration
}

// AnnotationClusterSetIP on a ServiceExport turns its VIP on ("true") or off
// ("false") regardless of the cluster's default.
const AnnotationClusterSetIP = "mcsd.io/clusterset-ip"

// Controller reconciles ServiceExports with the broker.
type Controller struct {
	cfg Config

	localKube  informers.SharedInformerFactory
	localMCS   mcsinformers.SharedInformerFactory
	brokerKube informers.SharedInformerFactory
	brokerMCS  mcsinformers.SharedInformerFactory
	// brokerClaims holds the ClusterSetIP block claims of every cluster,
	// brokerRules the export rules.
	brokerClaims informers.SharedInformerFactory
	brokerRules  informers.SharedInformerFactory
	claims       corelisters.ConfigMapLister
	rules        corelisters.ConfigMapLister
	exports      mcslisters.ServiceExportLister
	services     corelisters.ServiceLister
	slices       discoverylisters.EndpointSliceLister
	records      mcslisters.ServiceImportLister
	ownSlices    discoverylisters.EndpointSliceLister
	// Indexes by service, so that one service's sync reads its own objects
	// instead of scanning every object of the namespace or broker.
	sliceIndex    cache.Indexer
	recordIndex   cache.Indexer
	ownSliceIndex cache.Indexer
	synced        []cache.InformerSynced
	queue         workqueue.TypedRateLimitingInterface[string]
	vips          *vipBook
	applier       sliceapply.Applier
	initialized   chan struct{}

	brokerMu   sync.Mutex
	brokerDown bool

	// memberNamespace is where this cluster writes on the broker.
	memberNamespace string
}

// New builds the exporter; Run starts it.
func New(cfg Config) (*Controller, error) {
	if cfg.ClusterID == "" || cfg.BrokerNamespace == "" {
		return nil, fmt.Errorf("exporter: cluster ID and broker namespace are required")
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
	if cfg.Metrics == nil {
		cfg.Metrics = NewMetrics(nil)
	}
	if cfg.Recorder == nil {
		cfg.Recorder = &kuberecord.FakeRecorder{}
	}
	c := &Controller{
		cfg: cfg,
		// Failures back off to at most 10 s apart; a broker coming back is
		// noticed sooner by ObserveBroker.
		queue:       worker.NewQueue("exporter", nil),
		initialized: make(chan struct{}),
	}
	c.memberNamespace = record.MemberNamespace(cfg.BrokerNamespace, cfg.ClusterID)
	c.vips = newVIPBook(cfg.Allocators, c.vipRule)
	c.applier = sliceapply.Applier{
		Client:   cfg.Broker,
		What:     "broker EndpointSlice",
		UpToDate: sliceUpToDate,
		Update:   sliceUpdate,
		Wrote: func(operation string, _ *discoveryv1.EndpointSlice) {
			if operation != "found" {
				cfg.Metrics.writes.WithLabelValues("endpointslice", operation).Inc()
			}
		},
	}
	c.localKube = informers.NewSharedInformerFactory(cfg.Local, cfg.ResyncPeriod)
	c.localMCS = mcsinformers.NewSharedInformerFactory(cfg.LocalMCS, cfg.ResyncPeriod)
	// On the broker: every cluster's records (for the merge and VIPs),
	// across the members' namespaces, and only this cluster's slices, in
	// its own (to update them in place).
	c.brokerMCS = mcsinformers.NewSharedInformerFactoryWithOptions(cfg.BrokerWatchMCS, cfg.ResyncPeriod,
		mcsinformers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = record.LabelServiceNamespace }))
	c.brokerKube = informers.NewSharedInformerFactoryWithOptions(cfg.BrokerWatch, cfg.ResyncPeriod,
		informers.WithNamespace(c.memberNamespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.LabelSelector = record.ClusterSelector(cfg.ClusterID).String()
		}))
	c.brokerRules = informers.NewSharedInformerFactoryWithOptions(cfg.BrokerWatch, cfg.ResyncPeriod,
		informers.WithNamespace(cfg.BrokerNamespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = broker.LabelExportRule }))
	ruleInf := c.brokerRules.Core().V1().ConfigMaps()
	c.rules = ruleInf.Lister()
	// A rule coming, changing or going changes whose records count.
	if _, err := ruleInf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { c.resyncAll() },
		UpdateFunc: func(any, any) { c.resyncAll() },
		DeleteFunc: func(any) { c.resyncAll() },
	}); err != nil {
		return nil, err
	}

	c.brokerClaims = informers.NewSharedInformerFactoryWithOptions(cfg.BrokerWatch, cfg.ResyncPeriod,
		informers.WithNamespace(cfg.BrokerNamespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = clustersetip.LabelClaim }))
	claimInf := c.brokerClaims.Core().V1().ConfigMaps()
	c.claims = claimInf.Lister()
	if err := claimInf.Informer().SetTransform(trim.ManagedFields); err != nil {
		return nil, err
	}
	// A claim coming or going changes which VIPs records may hold: every
	// export is weighed again.
	if _, err := claimInf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { c.resyncAll() },
		UpdateFunc: func(any, any) { c.resyncAll() },
		DeleteFunc: func(any) { c.resyncAll() },
	}); err != nil {
		return nil, err
	}

	exportInf := c.localMCS.Multicluster().V1beta1().ServiceExports()
	serviceInf := c.localKube.Core().V1().Services()
	sliceInf := c.localKube.Discovery().V1().EndpointSlices()
	recordInf := c.brokerMCS.Multicluster().V1beta1().ServiceImports()
	ownSliceInf := c.brokerKube.Discovery().V1().EndpointSlices()
	c.exports, c.services = exportInf.Lister(), serviceInf.Lister()
	c.records, c.ownSlices = recordInf.Lister(), ownSliceInf.Lister()
	if err := sliceInf.Informer().AddIndexers(cache.Indexers{record.IndexByService: localSliceServiceIndex}); err != nil {
		return nil, err
	}
	for _, inf := range []cache.SharedIndexInformer{recordInf.Informer(), ownSliceInf.Informer()} {
		if err := inf.AddIndexers(cache.Indexers{record.IndexByService: record.ServiceIndex}); err != nil {
			return nil, err
		}
	}
	for _, inf := range []cache.SharedIndexInformer{exportInf.Informer(), serviceInf.Informer(), ownSliceInf.Informer(), ruleInf.Informer()} {
		if err := inf.SetTransform(trim.ManagedFields); err != nil {
			return nil, err
		}
	}
	if err := recordInf.Informer().SetTransform(record.OnlyMembers(cfg.BrokerNamespace, trim.ManagedFields)); err != nil {
		return nil, err
	}
	// Every EndpointSlice of the cluster is cached, read for its endpoints
	// only and never written back.
	if err := sliceInf.Informer().SetTransform(trim.RemoteEndpointSlice); err != nil {
		return nil, err
	}
	c.sliceIndex, c.recordIndex, c.ownSliceIndex = sliceInf.Informer().GetIndexer(), recordInf.Informer().GetIndexer(), ownSliceInf.Informer().GetIndexer()

	enqueueObject := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { c.enqueueKeyOf(obj) },
		UpdateFunc: func(_, obj any) { c.enqueueKeyOf(obj) },
		DeleteFunc: func(obj any) { c.enqueueKeyOf(obj) },
	}
	if _, err := serviceInf.Informer().AddEventHandler(enqueueObject); err != nil {
		return nil, err
	}
	if _, err := exportInf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { c.enqueueKeyOf(obj) },
		// The exporter's own status writes must not trigger another sync.
		UpdateFunc: func(old, obj any) {
			o, n := old.(*mcsv1beta1.ServiceExport), obj.(*mcsv1beta1.ServiceExport)
			if o.Generation != n.Generation || !maps.Equal(o.Annotations, n.Annotations) || n.DeletionTimestamp != nil {
				c.enqueueKeyOf(obj)
			}
		},
		DeleteFunc: func(obj any) { c.enqueueKeyOf(obj) },
	}); err != nil {
		return nil, err
	}
	if _, err := sliceInf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { c.enqueueLocalSlice(obj) },
		UpdateFunc: func(_, obj any) { c.enqueueLocalSlice(obj) },
		DeleteFunc: func(obj any) { c.enqueueLocalSlice(obj) },
	}); err != nil {
		return nil, err
	}
	// The VIP book learns every cluster's VIPs from this handler, so the
	// exporter waits for the handler to have seen the initial list, not
	// only for the cache to hold it: else a restarted exporter could hand
	// out a VIP its book has not seen yet.
	recordHandler, err := recordInf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { c.onRecord(nil, obj) },
		UpdateFunc: func(old, obj any) {
			c.onRecord(old, obj)
		},
		DeleteFunc: func(obj any) { c.onRecord(obj, nil) },
	})
	if err != nil {
		return nil, err
	}
	if _, err := ownSliceInf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		// Someone else changing or deleting this cluster's slices is
		// repaired; a slice that appears (made elsewhere, or left from
		// before and seen late) is checked too.
		AddFunc:    func(obj any) { c.enqueueBrokerObject(obj) },
		UpdateFunc: func(_, obj any) { c.enqueueBrokerObject(obj) },
		DeleteFunc: func(obj any) { c.enqueueBrokerObject(obj) },
	}); err != nil {
		return nil, err
	}
	c.synced = []cache.InformerSynced{
		exportInf.Informer().HasSynced, serviceInf.Informer().HasSynced, sliceInf.Informer().HasSynced,
		recordInf.Informer().HasSynced, ownSliceInf.Informer().HasSynced, recordHandler.HasSynced,
		claimInf.Informer().HasSynced, ruleInf.Informer().HasSynced,
	}
	return c, nil
}

// Run syncs until ctx ends. It first waits for every cache, then enqueues
// the services of this cluster's existing broker records, so exports
// deleted while the exporter was down are withdrawn.
func (c *Controller) Run(ctx context.Context) error {
	defer utilruntime.HandleCrash()
	defer c.queue.ShutDown()
	logger := klog.FromContext(ctx)
	for _, f := range []interface{ Start(<-chan struct{}) }{c.localKube, c.localMCS, c.brokerKube, c.brokerMCS, c.brokerClaims, c.brokerRules} {
		f.Start(ctx.Done())
	}
	logger.Info("Starting exporter", "clusterID", c.cfg.ClusterID, "brokerNamespace", c.cfg.BrokerNamespace, "memberNamespace", c.memberNamespace)
	if !cache.WaitForCacheSync(ctx.Done(), c.synced...) {
		return fmt.Errorf("exporter: caches did not sync: %w", ctx.Err())
	}
	own, err := c.records.ServiceImports(c.memberNamespace).List(record.ClusterSelector(c.cfg.ClusterID))
	if err != nil {
		return err
	}
	for _, r := range own {
		c.enqueueBrokerObject(r)
	}
	slices, err := c.ownSlices.EndpointSlices(c.memberNamespace).List(labels.Everything())
	if err != nil {
		return err
	}
	for _, s := range slices {
		c.enqueueBrokerObject(s)
	}
	close(c.initialized)
	pool := &worker.Pool{Queue: c.queue, Sync: c.sync, Observe: c.cfg.Metrics.observeSync, What: "Syncing export"}
	pool.Run(ctx, c.cfg.Workers)
	<-ctx.Done()
	logger.Info("Stopping exporter")
	return nil
}

// Synced reports whether the exporter has its caches and started syncing.
func (c *Controller) Synced() bool {
	select {
	case <-c.initialized:
		return true
	default:
		return false
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
	klog.InfoS("The broker answers again; syncing every export", "exports", len(exports))
	for _, se := range exports {
		c.queue.Add(se.Namespace + "/" + se.Name)
	}
	own, _ := c.records.ServiceImports(c.memberNamespace).List(record.ClusterSelector(c.cfg.ClusterID))
	for _, r := range own {
		c.enqueueBrokerObject(r)
	}
}

// exportRules are the broker's export rules as they stand now.
func (c *Controller) exportRules() broker.ExportRules {
	cms, err := c.rules.List(labels.Everything())
	if err != nil {
		return nil
	}
	return broker.ParseExportRules(cms)
}

// vipRule is the VIP rule as the claims on the broker stand now.
func (c *Controller) vipRule() clustersetip.Rule {
	rule := clustersetip.Rule{ClusterSet: c.cfg.ClusterSetCIDRs}
	cms, err := c.claims.List(labels.Everything())
	if err != nil {
		return rule
	}
	var claims []clustersetip.Claim
	for _, cm := range cms {
		if cl, err := clustersetip.ParseClaim(cm); err == nil {
			claims = append(claims, cl)
		}
	}
	rule.Owners = clustersetip.Owners(claims)
	return rule
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
		c.queue.Add(se.Namespace + "/" + se.Name)
	}
}

func (c *Controller) enqueueKeyOf(obj any) {
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		utilruntime.HandleError(err)
		return
	}
	c.queue.Add(key)
}

func (c *Controller) enqueueLocalSlice(obj any) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	s, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok {
		return
	}
	// Only the core controller's slices of a Service: never mcsd's own
	// imported slices, which carry no kubernetes.io/service-name label.
	if svc := s.Labels[discoveryv1.LabelServiceName]; svc != "" {
		c.queue.Add(s.Namespace + "/" + svc)
	}
}

// localSliceServiceIndex indexes the core controller's EndpointSlices by
// the Service they belong to (never mcsd's imported ones, which have no
// kubernetes.io/service-name label).
func localSliceServiceIndex(obj any) ([]string, error) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	s, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok || s.Labels[discoveryv1.LabelServiceName] == "" {
		return nil, nil
	}
	return []string{record.ServiceKey(s.Namespace, s.Labels[discoveryv1.LabelServiceName])}, nil
}

// enqueueBrokerObject enqueues the service a broker object belongs to.
func (c *Controller) enqueueBrokerObject(obj any) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return
	}
	ns, name := m.GetLabels()[record.LabelServiceNamespace], m.GetLabels()[record.LabelServiceName]
	if ns != "" && name != "" {
		c.queue.Add(ns + "/" + name)
	}
}

// onRecord keeps the VIP book current and re-syncs the service: another
// cluster's change can raise or clear this cluster's conflicts. The
// services holding the record's VIPs are re-synced too: one service taking
// or letting go of an address changes whether another may hold it.
func (c *Controller) onRecord(old, cur any) {
	recordOf := func(obj any) *mcsv1beta1.ServiceImport {
		if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = tomb.Obj
		}
		si, _ := obj.(*mcsv1beta1.ServiceImport)
		return si
	}
	o, n := recordOf(old), recordOf(cur)
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
	c.enqueueBrokerObject(latest)
	for _, v := range append(oldVIPs, curVIPs...) {
		ip, err := netip.ParseAddr(v)
		if err != nil {
			continue
		}
		for _, h := range c.vips.holdersOf(ip) {
			c.queue.Add(h.Service)
		}
	}
}

// holdingOf is a broker record's hold on its VIPs, read from its labels and
// precedence alone: every record of the clusterset passes here, and most
// hold no VIP this exporter weighs.
func holdingOf(si *mcsv1beta1.ServiceImport) clustersetip.Holding {
	return clustersetip.Holding{
		Cluster: si.Labels[record.LabelSourceCluster],
		Service: record.ServiceKey(si.Labels[record.LabelServiceNamespace], si.Labels[record.LabelServiceName]),
		Created: record.Precedence(si).Time,
	}
}
