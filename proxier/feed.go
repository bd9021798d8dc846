package proxier

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/client-go/tools/cache"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/mcsd-io/mcsd/mcsslice"
)

// Feed hands a [Provider] every change of the embedder's informers on
// ServiceImports and MCS EndpointSlices, as kube-proxy's pkg/proxy/config
// does for Services and EndpointSlices: the embedder owns and starts the
// informers, Feed owns the glue. The EndpointSlice informer may be limited
// to slices labelled multicluster.kubernetes.io/service-name; the proxier
// ignores the others anyway.
type Feed struct {
	provider        Provider
	imports, slices cache.ResourceEventHandlerRegistration
	sliceStore      cache.Store
	synced          atomic.Bool

	// mu orders slice deliveries with liveness changes; gone are the
	// clusters whose endpoints are withheld (see SetGoneClusters).
	mu   sync.Mutex
	gone mcsslice.GoneClusters
}

// NewFeed registers p's event handlers on the two informers. Call it before
// starting them, then [Feed.Run].
func NewFeed(imports, slices cache.SharedInformer, p Provider) (*Feed, error) {
	f := &Feed{provider: p, sliceStore: slices.GetStore()}
	var err error
	f.imports, err = imports.AddEventHandler(handlers(p.OnServiceImportAdd, p.OnServiceImportUpdate, p.OnServiceImportDelete))
	if err != nil {
		return nil, fmt.Errorf("proxier: watching ServiceImports: %w", err)
	}
	f.slices, err = slices.AddEventHandler(handlers(f.onSliceAdd, f.onSliceUpdate, f.onSliceDelete))
	if err != nil {
		_ = imports.RemoveEventHandler(f.imports)
		return nil, fmt.Errorf("proxier: watching EndpointSlices: %w", err)
	}
	return f, nil
}

// handlers calls add, update and delete with the informer's objects of
// type T, ignoring any other, and unwraps a delete the informer saw only on
// relist.
func handlers[T any](add func(T), update func(old, cur T), del func(T)) cache.ResourceEventHandlerFuncs {
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if o, ok := obj.(T); ok {
				add(o)
			}
		},
		UpdateFunc: func(old, cur any) {
			o, ok1 := old.(T)
			n, ok2 := cur.(T)
			if ok1 && ok2 {
				update(o, n)
			}
		},
		DeleteFunc: func(obj any) {
			if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = tomb.Obj
			}
			if o, ok := obj.(T); ok {
				del(o)
			}
		},
	}
}

// Run waits until both informers have delivered their initial lists to the
// provider, tells it so (which asks its sync loop for the first sync), and
// returns true; or returns false when ctx ends first.
func (f *Feed) Run(ctx context.Context) bool {
	if !cache.WaitForCacheSync(ctx.Done(), f.imports.HasSynced, f.slices.HasSynced) {
		return false
	}
	f.provider.OnServiceImportsSynced()
	f.provider.OnEndpointSlicesSynced()
	f.synced.Store(true)
	return true
}

// HasSynced says whether Run has handed the provider both initial lists.
func (f *Feed) HasSynced() bool { return f.synced.Load() }

// SetGoneClusters withholds the endpoints of the given clusters (their
// broker Lease expired, as the liveness ConfigMap of package liveness
// says) from the provider, and hands back those of clusters no longer in
// the set: their slices are delivered again, emptied or whole. The
// EndpointSlices themselves are left to the importer, which tidies them up
// later at a bounded rate; the data plane does not wait for that. A
// Proxier (or DualStack) applies the whole change in one sync.
func (f *Feed) SetGoneClusters(gone mcsslice.GoneClusters) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if h, ok := f.provider.(syncHolder); ok {
		defer h.holdSyncs()()
	}
	before := f.gone
	changed := gone.Changed(before)
	f.gone = gone
	if changed.Len() == 0 {
		return
	}
	for _, obj := range f.sliceStore.List() {
		s, ok := obj.(*discoveryv1.EndpointSlice)
		if !ok || !changed.Has(s.Labels[mcsv1beta1.LabelSourceCluster]) {
			continue
		}
		f.provider.OnEndpointSliceUpdate(before.Withhold(s), f.gone.Withhold(s))
	}
}

func (f *Feed) onSliceAdd(s *discoveryv1.EndpointSlice) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.provider.OnEndpointSliceAdd(f.gone.Withhold(s))
}

func (f *Feed) onSliceUpdate(old, cur *discoveryv1.EndpointSlice) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.provider.OnEndpointSliceUpdate(f.gone.Withhold(old), f.gone.Withhold(cur))
}

func (f *Feed) onSliceDelete(s *discoveryv1.EndpointSlice) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.provider.OnEndpointSliceDelete(s)
}
