package liveness

import (
	"context"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// Watcher follows the ConfigMap in one namespace and tells its subscriber
// which clusters are gone each time that changes.
type Watcher struct {
	factory  informers.SharedInformerFactory
	informer cache.SharedIndexInformer
	onChange func(gone sets.Set[string])

	mu   sync.Mutex
	last sets.Set[string]
}

// NewWatcher watches only the ConfigMap named ConfigMapName in namespace,
// so that RBAC may restrict the data plane to that one object. onChange is
// called from one goroutine at a time, with a set it may keep, first when
// the initial state is known (possibly empty: no ConfigMap yet).
func NewWatcher(kube kubernetes.Interface, namespace string, onChange func(gone sets.Set[string])) (*Watcher, error) {
	w := &Watcher{onChange: onChange}
	w.factory = informers.NewSharedInformerFactoryWithOptions(kube, 0,
		informers.WithNamespace(namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", ConfigMapName).String()
		}))
	w.informer = w.factory.Core().V1().ConfigMaps().Informer()
	if _, err := w.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { w.observe(obj) },
		UpdateFunc: func(_, obj any) { w.observe(obj) },
		DeleteFunc: func(any) { w.publish(sets.New[string]()) },
	}); err != nil {
		return nil, fmt.Errorf("liveness: watching ConfigMap %s/%s: %w", namespace, ConfigMapName, err)
	}
	return w, nil
}

// Run watches until ctx ends. It reports the empty set once the initial
// list held no ConfigMap.
func (w *Watcher) Run(ctx context.Context) {
	w.factory.Start(ctx.Done())
	if cache.WaitForCacheSync(ctx.Done(), w.informer.HasSynced) {
		w.mu.Lock()
		if w.last == nil {
			w.publishLocked(sets.New[string]())
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
	w.publish(Read(cm).Gone())
}

func (w *Watcher) publish(gone sets.Set[string]) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.publishLocked(gone)
}

func (w *Watcher) publishLocked(gone sets.Set[string]) {
	if w.last != nil && w.last.Equal(gone) {
		return
	}
	klog.InfoS("Clusterset liveness changed", "goneClusters", Describe(gone))
	w.last = gone
	w.onChange(gone.Clone())
}
