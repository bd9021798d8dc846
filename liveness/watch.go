package liveness

import (
	"context"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/mcsd-io/mcsd/mcsslice"
)

// Watcher follows the ConfigMap in one namespace and tells each of its
// subscribers which clusters are gone each time that changes.
type Watcher struct {
	factory     informers.SharedInformerFactory
	informer    cache.SharedIndexInformer
	subscribers []*subscriber
	logger      klog.Logger

	mu   sync.Mutex
	last *mcsslice.GoneClusters
}

// subscriber is told the latest set on a goroutine of its own, so that a
// slow one (DNS republishing thousands of names) delays no other (the
// proxier); a set it had no time for is skipped for the next.
type subscriber struct {
	onChange func(gone mcsslice.GoneClusters)
	wake     chan struct{}
	mu       sync.Mutex
	latest   mcsslice.GoneClusters
}

// NewWatcher watches only the ConfigMap named ConfigMapName in namespace,
// so that RBAC may restrict the data plane to that one object. Each
// subscriber is called from a goroutine of its own, one call at a time,
// with the set of clusters gone: first when the initial state is known (possibly
// empty: no ConfigMap yet), then with the latest set after each change.
// It logs each change with logger.
func NewWatcher(logger klog.Logger, kube kubernetes.Interface, namespace string, subscribers ...func(gone mcsslice.GoneClusters)) (*Watcher, error) {
	w := &Watcher{logger: logger}
	for _, fn := range subscribers {
		w.subscribers = append(w.subscribers, &subscriber{onChange: fn, wake: make(chan struct{}, 1)})
	}
	w.factory = informers.NewSharedInformerFactoryWithOptions(kube, 0,
		informers.WithNamespace(namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", ConfigMapName).String()
		}))
	w.informer = w.factory.Core().V1().ConfigMaps().Informer()
	if _, err := w.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { w.observe(obj) },
		UpdateFunc: func(_, obj any) { w.observe(obj) },
		DeleteFunc: func(any) { w.publish(mcsslice.NewGoneClusters()) },
	}); err != nil {
		return nil, fmt.Errorf("liveness: watching ConfigMap %s/%s: %w", namespace, ConfigMapName, err)
	}
	return w, nil
}

// Run watches until ctx ends. It reports the empty set once the initial
// list held no ConfigMap.
func (w *Watcher) Run(ctx context.Context) {
	for _, sub := range w.subscribers {
		go sub.run(ctx)
	}
	w.factory.Start(ctx.Done())
	if cache.WaitForCacheSync(ctx.Done(), w.informer.HasSynced) {
		w.mu.Lock()
		if w.last == nil {
			w.publishLocked(mcsslice.NewGoneClusters())
		}
		w.mu.Unlock()
	}
	<-ctx.Done()
	w.factory.Shutdown()
}

// HasSynced says whether the initial state was read.
func (w *Watcher) HasSynced() bool { return w.informer.HasSynced() }

func (w *Watcher) observe(obj any) {
	cm, ok := obj.(*corev1.ConfigMap)
	if !ok || cm.Name != ConfigMapName {
		return
	}
	w.publish(Read(cm).GoneClusters())
}

func (w *Watcher) publish(gone mcsslice.GoneClusters) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.publishLocked(gone)
}

func (w *Watcher) publishLocked(gone mcsslice.GoneClusters) {
	if w.last != nil && gone.Changed(*w.last).Len() == 0 {
		return
	}
	w.logger.Info("Clusterset liveness changed", "goneClusters", gone.String())
	w.last = &gone
	for _, sub := range w.subscribers {
		sub.offer(gone)
	}
}

func (s *subscriber) offer(gone mcsslice.GoneClusters) {
	s.mu.Lock()
	s.latest = gone
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *subscriber) run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.wake:
		}
		s.mu.Lock()
		gone := s.latest
		s.mu.Unlock()
		s.onChange(gone)
	}
}
