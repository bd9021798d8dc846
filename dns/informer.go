package dns

import (
	"context"
	"fmt"

	discoveryv1 "k8s.io/api/discovery/v1"
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
	importReg, err := imports.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { x.onImport(obj) },
		UpdateFunc: func(_, obj any) { x.onImport(obj) },
		DeleteFunc: func(obj any) { x.onImportDelete(obj) },
	})
	if err != nil {
		return fmt.Errorf("dns: watching ServiceImports: %w", err)
	}
	defer func() { _ = imports.RemoveEventHandler(importReg) }()
	sliceReg, err := slices.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { x.onSlice(obj) },
		UpdateFunc: func(_, obj any) { x.onSlice(obj) },
		DeleteFunc: func(obj any) { x.onSliceDelete(obj) },
	})
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

func (x *Index) onImport(obj any) {
	if si, ok := obj.(*mcsv1beta1.ServiceImport); ok {
		x.setImport(si)
	}
}

func (x *Index) onImportDelete(obj any) {
	if si, ok := obj.(*mcsv1beta1.ServiceImport); ok {
		x.deleteImport(si.Namespace, si.Name)
		return
	}
	// The watch missed the deletion; the key says what was deleted.
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		if namespace, name, err := cache.SplitMetaNamespaceKey(t.Key); err == nil {
			x.deleteImport(namespace, name)
			return
		}
	}
	x.logger.V(2).Info("Ignoring the deletion of an object that is not a ServiceImport", "object", klog.Format(obj))
}

func (x *Index) onSlice(obj any) {
	if es, ok := obj.(*discoveryv1.EndpointSlice); ok {
		x.setSlice(es)
	}
}

func (x *Index) onSliceDelete(obj any) {
	if es, ok := obj.(*discoveryv1.EndpointSlice); ok {
		x.deleteSlice(es.Namespace, es.Name)
		return
	}
	// The watch missed the deletion; the key says what was deleted.
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		if namespace, name, err := cache.SplitMetaNamespaceKey(t.Key); err == nil {
			x.deleteSlice(namespace, name)
			return
		}
	}
	x.logger.V(2).Info("Ignoring the deletion of an object that is not an EndpointSlice", "object", klog.Format(obj))
}
