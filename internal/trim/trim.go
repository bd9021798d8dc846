// Package trim keeps informer caches lean: transforms that drop from each
// object what no reader of the cache uses. It must only drop fields that an
// update built from the cached object leaves unchanged on the server.
package trim

import "k8s.io/apimachinery/pkg/api/meta"

// ManagedFields is an informer transform (cache.TransformFunc) that drops
// managedFields: nothing in mcsd reads them, at tens of thousands of
// objects they are much of a cache's memory, and an update of an object
// without them leaves them unchanged on the server.
func ManagedFields(obj any) (any, error) {
	if m, err := meta.Accessor(obj); err == nil {
		m.SetManagedFields(nil)
	}
	return obj, nil
}
