// Package trim keeps informer caches lean: transforms that drop from each
// object what no reader of the cache uses. It must only drop fields that an
// update built from the cached object leaves unchanged on the server.
package trim

import (
	"unique"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

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

// RemoteEndpointSlice is an informer transform for EndpointSlices read only
// for what they hold (a mirror's sources): it keeps the name, namespace,
// labels and resourceVersion, the address type, endpoints and ports, and
// drops the rest of the metadata. Label keys and values are interned: the
// same few keys and cluster IDs repeat on every slice. Never write back an
// object this transform made.
func RemoteEndpointSlice(obj any) (any, error) {
	s, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok {
		return ManagedFields(obj)
	}
	return &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name:            s.Name,
			Namespace:       s.Namespace,
			Labels:          Labels(s.Labels),
			ResourceVersion: s.ResourceVersion,
		},
		AddressType: s.AddressType,
		Endpoints:   s.Endpoints,
		Ports:       s.Ports,
	}, nil
}

// Labels returns labels with each key and value interned, so that equal
// strings of different objects share their bytes.
func Labels(labels map[string]string) map[string]string {
	if labels == nil {
		return nil
	}
	out := make(map[string]string, len(labels))
	for k, v := range labels {
		out[unique.Make(k).Value()] = unique.Make(v).Value()
	}
	return out
}
