package dns

import (
	"context"
	"fmt"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
)

// Run feeds the Index from the embedder's informers on ServiceImports and
// MCS EndpointSlices, as proxier.Feed feeds the proxier: the embedder owns
// and starts them (the EndpointSlice informer may be limited to
// mcsslice.Selector; slices without both MCS labels are ignored anyway). Run
// adds its event handlers, waits until they have seen every object of the
// initial lists, marks the Index synced, and keeps it up to date until ctx
// is done, when it removes them.
func (x *Index) Run(ctx context.Context, imports, slices cache.SharedInformer) error {
	importReg, err := imports.AddEventHandler(handler(x, func(si *mcsv1beta1.ServiceImport) { x.setImport(si) }, x.deleteImport, "a ServiceImport"))
	if err != nil {
		return fmt.Errorf("dns: watching ServiceImports: %w", err)
	}
	defer func() { _ = imports.RemoveEventHandler(importReg) }()
	sliceReg, err := slices.AddEventHandler(handler(x, func(es *discoveryv1.EndpointSlice) { x.setSlice(es) }, x.deleteSlice, "an EndpointSlice"))
	if err != nil {
		return fmt.Errorf("dns: watching EndpointSlices: %w", err)
	}
	defer func() { _ = slices.RemoveEventHandler(sliceReg) }()

	if !cache.WaitForCacheSync(ctx.Done(), importReg.HasSynced, sliceReg.HasSynced) {
		return fmt.Errorf("dns: ServiceImports and EndpointSlices did not sync before the context ended: %w", context.Cause(ctx))
	}
	x.markSynced()
	services, endpoints := x.Size()
	x.logger.Info("DNS index synced", "services", services, "readyEndpoints", endpoints)
	<-ctx.Done()
	return nil
}

// handler hands the Index every T the informer adds or updates (set), and
// the namespace and name of every one it deletes (del), also when the
// watch missed the deletion and only the key says what was deleted. what
// names a T in the log of an object that is not one.
func handler[T metav1.Object](x *Index, set func(T), del func(namespace, name string), what string) cache.ResourceEventHandlerFuncs {
	onSet := func(obj any) {
		if o, ok := obj.(T); ok {
			set(o)
		}
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    onSet,
		UpdateFunc: func(_, obj any) { onSet(obj) },
		DeleteFunc: func(obj any) {
			if o, ok := obj.(T); ok {
				del(o.GetNamespace(), o.GetName())
				return
			}
			// The watch missed the deletion; the key says what was deleted.
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				if namespace, name, err := cache.SplitMetaNamespaceKey(t.Key); err == nil {
					del(namespace, name)
					return
				}
			}
			x.logger.V(2).Info("Ignoring the deletion of an object that is not "+what, "object", klog.Format(obj))
		},
	}
}
