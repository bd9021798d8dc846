package controller

import (
	"context"
	"fmt"

	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/mcsd-io/mcsd/internal/record"
)

// Base is the part of a controller every mcsd controller has: Shared, a
// workqueue of "<namespace>/<name>" keys drained by Shared.Workers workers,
// its Metrics, and the event handlers it registered, which it removes when
// it stops (the informers it is handed may outlive it: a controller is
// built anew for each leadership term). Embed it.
type Base struct {
	Shared
	Queue   workqueue.TypedRateLimitingInterface[string]
	Metrics *Metrics

	name        string
	synced      []cache.InformerSynced
	handlers    []registration
	initialized chan struct{}
}

// registration is an event handler on an informer.
type registration struct {
	informer cache.SharedIndexInformer
	handle   cache.ResourceEventHandlerRegistration
}

// NewBase returns the base of the controller name ("exporter"), with the
// defaults of s filled in. Its queue's delays follow s.Clock.
func NewBase(name string, s Shared, m *Metrics) (*Base, error) {
	s, err := s.WithDefaults()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	s.Logger = s.Logger.WithName(name)
	return &Base{
		Shared:  s,
		Queue:   newQueue(name, s.Clock),
		Metrics: m,
		name:    name,
		// Closed once the caches have synced and the controller started.
		initialized: make(chan struct{}),
	}, nil
}

// Handle adds h to inf, and has Run wait until h has seen inf's initial
// list before the controller starts.
func (b *Base) Handle(inf cache.SharedIndexInformer, h cache.ResourceEventHandler) error {
	reg, err := inf.AddEventHandler(h)
	if err != nil {
		return fmt.Errorf("%s: %w", b.name, err)
	}
	b.handlers = append(b.handlers, registration{inf, reg})
	b.synced = append(b.synced, reg.HasSynced)
	return nil
}

// WaitFor has Run wait for more than the controller's handlers: caches it
// reads without a handler, or another controller it depends on.
func (b *Base) WaitFor(synced ...cache.InformerSynced) {
	b.synced = append(b.synced, synced...)
}

// Release removes the controller's event handlers. Run does it when it
// returns; a controller whose Run never ran calls it when it is dropped.
func (b *Base) Release() {
	for _, h := range b.handlers {
		_ = h.informer.RemoveEventHandler(h.handle)
	}
	b.handlers = nil
}

// Run waits until every cache and handler has synced, marks the controller
// synced, calls start (what the controller does once before its first
// sync: enqueue what is there, start its other loops), then runs the
// workers, each calling sync with one key at a time, until ctx ends. The
// informers are their owner's to start.
func (b *Base) Run(ctx context.Context, what string, start func(ctx context.Context) error, sync func(ctx context.Context, namespace, name string) error) error {
	defer utilruntime.HandleCrash()
	defer b.Release()
	defer b.Queue.ShutDown()
	logger := klog.FromContext(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), b.synced...) {
		return fmt.Errorf("%s: caches did not sync: %w", b.name, ctx.Err())
	}
	b.MarkSynced()
	if err := start(ctx); err != nil {
		return fmt.Errorf("%s: %w", b.name, err)
	}
	pool := &workerPool{Queue: b.Queue, Sync: keySync(sync), Observe: b.Metrics.ObserveSync, What: what, Clock: b.Clock}
	pool.Run(ctx, b.Workers)
	<-ctx.Done()
	logger.Info("Stopping " + b.name)
	return nil
}

// keySync is sync as a worker calls it: with the key split, and the
// service named in the context's logger.
func keySync(sync func(ctx context.Context, namespace, name string) error) func(ctx context.Context, key string) error {
	return func(ctx context.Context, key string) error {
		namespace, name, err := cache.SplitMetaNamespaceKey(key)
		if err != nil {
			return nil
		}
		ctx = klog.NewContext(ctx, klog.FromContext(ctx).WithValues("service", key))
		return sync(ctx, namespace, name)
	}
}

// MarkSynced marks the controller synced: Run does once its caches are; a
// test that drives a controller's handlers and sync without Run does it
// itself.
func (b *Base) MarkSynced() { close(b.initialized) }

// Synced reports whether the controller has its caches and started syncing.
func (b *Base) Synced() bool {
	select {
	case <-b.initialized:
		return true
	default:
		return false
	}
}

// EnqueueObject enqueues the "<namespace>/<name>" of obj, as a local object
// of the service it is named for (a ServiceExport, a Service, a
// ServiceImport).
func (b *Base) EnqueueObject(obj any) {
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		utilruntime.HandleError(err)
		return
	}
	b.Queue.Add(key)
}

// EnqueueService enqueues the service a broker object (a record or a
// broker EndpointSlice) belongs to, read from its labels.
func (b *Base) EnqueueService(obj any) {
	keys, _ := record.ServiceIndex(obj)
	for _, k := range keys {
		b.Queue.Add(k)
	}
}

// AddIndex adds the index name to inf unless it has one: an informer that
// outlives a controller keeps the index of an earlier one.
func AddIndex(inf cache.SharedIndexInformer, name string, fn cache.IndexFunc) error {
	if _, ok := inf.GetIndexer().GetIndexers()[name]; ok {
		return nil
	}
	return inf.AddIndexers(cache.Indexers{name: fn})
}

// OnAny is an event handler that calls fn with the object of every add,
// update (the new object) and delete.
func OnAny(fn func(obj any)) cache.ResourceEventHandlerFuncs {
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    fn,
		UpdateFunc: func(_, obj any) { fn(obj) },
		DeleteFunc: fn,
	}
}
