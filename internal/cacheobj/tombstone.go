// Object and LabelsOf unwrap what an informer hands a delete handler: the
// object itself, or, when the watch missed the deletion and a relist found
// the object gone, a cache.DeletedFinalStateUnknown holding its last known
// state. Handlers and index functions read objects through it instead of
// each unwrapping tombstones its own way.

package cacheobj

import (
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/tools/cache"
)

// Object returns obj, or the object of its tombstone, as a T; false when it
// is not one.
func Object[T any](obj any) (T, bool) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	o, ok := obj.(T)
	return o, ok
}

// LabelsOf returns the labels of obj, or of the object of its tombstone; nil
// for what has none.
func LabelsOf(obj any) map[string]string {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return nil
	}
	return m.GetLabels()
}
