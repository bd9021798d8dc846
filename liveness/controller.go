package liveness

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/mcsd-io/mcsd/internal/cacheobj"
	"github.com/mcsd-io/mcsd/internal/caches"
	"github.com/mcsd-io/mcsd/internal/controller"
	"github.com/mcsd-io/mcsd/internal/record"
)

// Defaults of Config.
const (
	// DefaultNamespace is where the ConfigMap goes when Config.Namespace
	// is empty: the namespace mcsd's manifests run it in.
	DefaultNamespace = "mcsd-system"
	// DefaultTTL is Config.TTL when it is not set.
	DefaultTTL = 10 * time.Second
	// DefaultClockSkew is how far behind this controller's clock another
	// cluster's may be for its Lease to count as live on first sight
	// (Config.ClockSkew).
	DefaultClockSkew = 5 * time.Second
	// DefaultGrace is how long the records of a dead cluster still count
	// in merges (Config.Grace).
	DefaultGrace = 10 * time.Minute
)

// Event reasons, on the ConfigMap.
const (
	// Once per cluster transition.
	EventClusterLeft = "ClusterLeft"
	EventClusterBack = "ClusterBack"
	// Once per broker outage.
	EventBrokerUnreachable = "BrokerUnreachable"
	EventBrokerReachable   = "BrokerReachable"
	// Once per cluster whose records stop counting in merges after the
	// grace.
	EventClusterGonePastGrace = "ClusterGonePastGrace"
)

// Config is what the liveness controller needs besides the broker's
// records and Leases. Shared's Local clients write the ConfigMap; its
// Broker clients probe the broker (clients no dial gate holds back: a
// probe that waits means the broker is down).
type Config struct {
	controller.Shared
	// Namespace is this cluster's namespace that holds the ConfigMap
	// (default DefaultNamespace). It must exist.
	Namespace string
	// TTL: a cluster whose broker Lease has not been renewed for this long
	// is gone (default DefaultTTL).
	TTL time.Duration
	// Grace is how long the records of a dead cluster (or of a cluster
	// without a Lease) still count in merges (default DefaultGrace).
	Grace time.Duration
	// ClockSkew is how far behind this cluster's clock another cluster's
	// may be for its Lease, seen first, to count as live (default
	// DefaultClockSkew).
	ClockSkew time.Duration
	// Metrics (nil: unregistered ones).
	Metrics *Metrics
	// Wrote, when set, counts each write of the ConfigMap by kind
	// ("configmap") and operation; mcsd counts them among the importer's.
	Wrote func(kind, operation string)
}

// TransitionKind is what changed.
type TransitionKind int

const (
	// ClusterLive: the cluster's Lease is renewed again (or was seen
	// renewed first); its endpoints belong to its services.
	ClusterLive TransitionKind = iota
	// ClusterGone: its Lease was not renewed within the TTL, or was
	// deleted; its endpoints are not served.
	ClusterGone
	// ClusterPinned: its records count in merges again.
	ClusterPinned
	// ClusterUnpinned: it has been gone past the grace; its records no
	// longer decide its services' type, ports and ClusterSetIPs.
	ClusterUnpinned
	// BrokerBack: the broker answers again after an outage; what was held
	// back meanwhile is due.
	BrokerBack
)

// Transition is one change the controller decided, for its listener.
type Transition struct {
	Kind TransitionKind
	// Cluster is the cluster that changed (none for BrokerBack).
	Cluster string
}

// Controller owns the clusterset's liveness as this cluster sees it: it
// follows every cluster's heartbeat Lease on the broker (the book), asks
// the broker whether it answers (the probe), decides each cluster's
// transitions (the cluster worker) and publishes them on the ConfigMap the
// node's data plane reads. The importer asks it whether a cluster is live,
// whether its records count, and whether the broker is down, and is told
// of every transition.
type Controller struct {
	cfg Config

	book   *leaseBook
	broker reachability
	// records is the broker's records, for the clusters that export and
	// their services.
	records cache.Indexer
	leases  cache.SharedIndexInformer
	lease   cache.ResourceEventHandlerRegistration

	clusterQueue workqueue.TypedDelayingInterface[string]
	probeNow     chan struct{}
	publishNow   chan struct{}
	livenessRef  atomic.Pointer[corev1.ConfigMap]
	synced       atomic.Bool

	mu        sync.Mutex
	listeners []func(Transition)
}

// New builds the liveness controller on the broker's records and Leases,
// which it adds its index and event handler to; Run starts it once their
// owner has started them.
func New(cfg Config, broker *caches.Broker) (*Controller, error) {
	cfg = cfg.withDefaults()
	var err error
	if cfg.Shared, err = cfg.Shared.WithDefaults(); err != nil {
		return nil, fmt.Errorf("liveness: %w", err)
	}
	cfg.Logger = cfg.Logger.WithName("liveness")
	c := &Controller{
		cfg:  cfg,
		book: newLeaseBook(cfg.Clock, cfg.TTL, cfg.ClusterID),
		// Named as when the importer held it: its workqueue metrics keep
		// their queue label.
		clusterQueue: workqueue.NewTypedDelayingQueueWithConfig(workqueue.TypedDelayingQueueConfig[string]{Name: "importer-clusters", Clock: cfg.Clock}),
		probeNow:     make(chan struct{}, 1),
		publishNow:   make(chan struct{}, 1),
		leases:       broker.Leases(),
	}
	c.book.skew, c.book.grace = cfg.ClockSkew, cfg.Grace
	c.broker.lastContact = cfg.Clock.Now()
	records := broker.Records()
	if err := controller.AddIndex(records, record.IndexByCluster, record.ClusterIndex); err != nil {
		return nil, err
	}
	c.records = records.GetIndexer()
	c.lease, err = c.leases.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { c.onLease(obj, false) },
		UpdateFunc: func(_, obj any) { c.onLease(obj, false) },
		DeleteFunc: func(obj any) { c.onLease(obj, true) },
	})
	if err != nil {
		return nil, fmt.Errorf("liveness: %w", err)
	}
	return c, nil
}

func (cfg Config) withDefaults() Config {
	if cfg.Namespace == "" {
		cfg.Namespace = DefaultNamespace
	}
	if cfg.TTL <= 0 {
		cfg.TTL = DefaultTTL
	}
	if cfg.Grace <= 0 {
		cfg.Grace = DefaultGrace
	}
	if cfg.ClockSkew <= 0 {
		cfg.ClockSkew = DefaultClockSkew
	}
	if cfg.Metrics == nil {
		cfg.Metrics = NewMetrics(nil)
	}
	return cfg
}

// OnTransition adds fn to those told of every transition, on the cluster
// worker's goroutine (or the probe's, for BrokerBack). Add it before Run.
func (c *Controller) OnTransition(fn func(Transition)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.listeners = append(c.listeners, fn)
}

func (c *Controller) notify(t Transition) {
	c.mu.Lock()
	listeners := c.listeners
	c.mu.Unlock()
	for _, fn := range listeners {
		fn(t)
	}
}

// Run follows liveness until ctx ends. Once the records and the Leases
// have synced, every cluster without a Lease is dead since now, every
// cluster that exports is judged, and the ConfigMap is published.
func (c *Controller) Run(ctx context.Context) error {
	defer func() { _ = c.leases.RemoveEventHandler(c.lease) }()
	defer c.clusterQueue.ShutDown()
	if !cache.WaitForCacheSync(ctx.Done(), c.lease.HasSynced) {
		return fmt.Errorf("liveness: broker Leases did not sync: %w", ctx.Err())
	}
	c.book.start(c.cfg.Clock.Now())
	for _, cluster := range c.records.ListIndexFuncValues(record.IndexByCluster) {
		c.clusterQueue.Add(cluster)
	}
	c.synced.Store(true)
	c.cfg.Metrics.setBrokerReachable(true)
	c.reevaluateAll()
	c.requestPublish()
	go c.runProbe(ctx)
	go c.runPublisher(ctx)
	go wait.UntilWithContext(ctx, c.clusterWorker, time.Second)
	<-ctx.Done()
	return nil
}

// HasSynced says whether the book holds every Lease and started judging:
// the importer syncs nothing before, or every cluster would look dead.
func (c *Controller) HasSynced() bool { return c.synced.Load() }

// Live reports whether cluster's endpoints belong to its services: this
// cluster always, another while its Lease is renewed within the TTL.
func (c *Controller) Live(cluster string) bool { return c.book.live(cluster) }

// Pinned reports whether cluster's records count in merges: it is live, or
// dead for less than the grace.
func (c *Controller) Pinned(cluster string) bool { return c.book.pinned(cluster) }

// clusterWorker reevaluates clusters whose Lease changed or is due to
// expire.
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

// syncCluster decides whether cluster's liveness or pinning changed, says
// so (log, Event, metric), publishes it and tells the listeners, and
// schedules the next evaluation.
func (c *Controller) syncCluster(ctx context.Context, cluster string) {
	logger := klog.FromContext(ctx)
	if live, changed, known := c.book.transition(cluster); changed {
		// The data plane acts on the published liveness; the services'
		// objects follow.
		c.requestPublish()
		services := c.services(cluster)
		switch {
		case live:
			logger.Info("Cluster is live: its Lease is renewed", "cluster", cluster, "services", services)
			if known {
				c.cfg.Recorder.Eventf(c.Object(), corev1.EventTypeNormal, EventClusterBack,
					"Cluster %s is back: its broker Lease is renewed again; its endpoints of %d services are served again", cluster, services)
			}
			c.notify(Transition{Kind: ClusterLive, Cluster: cluster})
		default:
			logger.Info("Cluster is gone: its Lease was not renewed within the TTL; its endpoints are no longer served", "cluster", cluster, "ttl", c.cfg.TTL, "services", services)
			c.cfg.Metrics.clusterDropped(cluster)
			c.cfg.Recorder.Eventf(c.Object(), corev1.EventTypeWarning, EventClusterLeft,
				"Cluster %s is gone: its broker Lease was not renewed within %s; its endpoints of %d services are no longer served until it renews", cluster, c.cfg.TTL, services)
			c.notify(Transition{Kind: ClusterGone, Cluster: cluster})
		}
	}
	if pinned, changed := c.book.pinTransition(cluster); changed {
		services := c.services(cluster)
		if pinned {
			logger.Info("Cluster's records count again in merges", "cluster", cluster, "services", services)
			c.notify(Transition{Kind: ClusterPinned, Cluster: cluster})
		} else {
			logger.Info("Cluster is gone past the grace: its records no longer count in merges (type, ports, ClusterSetIPs)", "cluster", cluster, "grace", c.cfg.Grace, "services", services)
			c.cfg.Recorder.Eventf(c.Object(), corev1.EventTypeWarning, EventClusterGonePastGrace,
				"Cluster %s has been gone for more than %s: its records of %d services no longer decide their type, ports or ClusterSetIPs until it renews its Lease", cluster, c.cfg.Grace, services)
			c.notify(Transition{Kind: ClusterUnpinned, Cluster: cluster})
		}
	}
	if d, ok := c.book.nextChange(cluster); ok {
		// A little past the change, so the evaluation then sees it.
		c.clusterQueue.AddAfter(cluster, d+10*time.Millisecond)
	}
	c.cfg.Metrics.setLiveClusters(c.book.liveCount())
}

// services counts the services cluster exports: its records.
func (c *Controller) services(cluster string) int {
	objs, _ := c.records.ByIndex(record.IndexByCluster, cluster)
	n := 0
	for _, o := range objs {
		if keys, _ := record.ServiceIndex(o); len(keys) > 0 {
			n++
		}
	}
	return n
}

// onLease notes a heartbeat Lease's renewal or deletion and has its
// cluster reevaluated.
func (c *Controller) onLease(obj any, deleted bool) {
	l, ok := cacheobj.Object[*coordinationv1.Lease](obj)
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
	c.cfg.Logger.V(4).Info("Saw a heartbeat Lease", "cluster", cluster, "source", source, "renewTime", v.renew, "resourceVersion", l.ResourceVersion, "renewal", renewal)
	if renewal {
		c.clusterQueue.Add(cluster)
	}
}
