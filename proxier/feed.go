package proxier

import (
	"context"
	"fmt"
	"sync/atomic"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/client-go/tools/cache"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
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
	f.imports, err = imports.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if si, ok := obj.(*mcsv1beta1.ServiceImport); ok {
				p.OnServiceImportAdd(si)
			}
		},
		UpdateFunc: func(old, cur any) {
			o, ok1 := old.(*mcsv1beta1.ServiceImport)
			n, ok2 := cur.(*mcsv1beta1.ServiceImport)
			if ok1 && ok2 {
				p.OnServiceImportUpdate(o, n)
			}
		},
		DeleteFunc: func(obj any) {
			if si, ok := deleted(obj).(*mcsv1beta1.ServiceImport); ok {
				p.OnServiceImportDelete(si)
			}
		},
	})
	if err != nil {
		return nil, fmt.Errorf("proxier: watching ServiceImports: %w", err)
	}
	f.slices, err = slices.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if s, ok := obj.(*discoveryv1.EndpointSlice); ok {
				p.OnEndpointSliceAdd(s)
			}
		},
		UpdateFunc: func(old, cur any) {
			o, ok1 := old.(*discoveryv1.EndpointSlice)
			n, ok2 := cur.(*discoveryv1.EndpointSlice)
			if ok1 && ok2 {
				p.OnEndpointSliceUpdate(o, n)
			}
		},
		DeleteFunc: func(obj any) {
			if s, ok := deleted(obj).(*discoveryv1.EndpointSlice); ok {
				p.OnEndpointSliceDelete(s)
			}
		},
	})
	if err != nil {
		_ = imports.RemoveEventHandler(f.imports)
		return nil, fmt.Errorf("proxier: watching EndpointSlices: %w", err)
	}
	return f, nil
}

// deleted unwraps the object of a delete the informer saw only on relist.
func deleted(obj any) any {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		return tomb.Obj
	}
	return obj
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
