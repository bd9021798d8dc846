package proxier

import (
	"context"
	"fmt"
	"sync/atomic"

	"k8s.io/client-go/tools/cache"
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
	synced          atomic.Bool
}

// NewFeed registers p's event handlers on the two informers. Call it before
// starting them, then [Feed.Run].
func NewFeed(imports, slices cache.SharedInformer, p Provider) (*Feed, error) {
	f := &Feed{provider: p}
	var err error
	f.imports, err = imports.AddEventHandler(handlers(p.OnServiceImportAdd, p.OnServiceImportUpdate, p.OnServiceImportDelete))
	if err != nil {
		return nil, fmt.Errorf("proxier: watching ServiceImports: %w", err)
	}
	f.slices, err = slices.AddEventHandler(handlers(p.OnEndpointSliceAdd, p.OnEndpointSliceUpdate, p.OnEndpointSliceDelete))
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
