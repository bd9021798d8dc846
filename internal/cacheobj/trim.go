// Trimming keeps informer caches lean: transforms that drop from each
// object what no reader of the cache uses. It must only drop fields that an
// update built from the cached object leaves unchanged on the server.

package cacheobj

import (
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
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
// drops the rest of the metadata, with well-known label keys shared (see
// SharedLabels). Never write back an object this transform made.
func RemoteEndpointSlice(obj any) (any, error) {
	s, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok {
		return ManagedFields(obj)
	}
	return &discoveryv1.EndpointSlice{
		ObjectMeta:  identity(&s.ObjectMeta),
		AddressType: s.AddressType,
		Endpoints:   s.Endpoints,
		Ports:       s.Ports,
	}, nil
}

// DataPlaneSlice is an informer transform for the MCS EndpointSlices a
// node's data plane (DNS and the proxier) reads and never writes: it keeps
// the identity (see identity), the annotations keep names (the ServicePorts
// one, and the trigger time the proxier's latency metric reads), the
// address type and ports, and of each endpoint its addresses, conditions,
// hostname, node, zone and hints. Never write back an object this
// transform made; a cache the importer shares keeps whole slices.
func DataPlaneSlice(keep ...string) func(obj any) (any, error) {
	return func(obj any) (any, error) {
		s, ok := obj.(*discoveryv1.EndpointSlice)
		if !ok {
			return ManagedFields(obj)
		}
		out := &discoveryv1.EndpointSlice{ObjectMeta: identity(&s.ObjectMeta), AddressType: s.AddressType, Ports: s.Ports}
		for _, k := range keep {
			if v, ok := s.Annotations[k]; ok {
				if out.Annotations == nil {
					out.Annotations = make(map[string]string, len(keep))
				}
				out.Annotations[k] = v
			}
		}
		if len(s.Endpoints) > 0 {
			out.Endpoints = make([]discoveryv1.Endpoint, len(s.Endpoints))
			for i, ep := range s.Endpoints {
				out.Endpoints[i] = discoveryv1.Endpoint{
					Addresses: ep.Addresses, Conditions: ep.Conditions, Hostname: ep.Hostname,
					NodeName: ep.NodeName, Zone: ep.Zone, Hints: ep.Hints,
				}
			}
		}
		return out, nil
	}
}

// SharedLabels returns a copy of labels whose keys, when they are one of the
// well-known keys mcsd selects on, are the package's constants: the same
// few keys repeat on every one of tens of thousands of objects, and a
// decoded object otherwise holds its own copy of each.
func SharedLabels(labels map[string]string) map[string]string {
	if labels == nil {
		return nil
	}
	out := make(map[string]string, len(labels))
	for k, v := range labels {
		if known, ok := wellKnownKeys[k]; ok {
			k = known
		}
		out[k] = v
	}
	return out
}

// wellKnownKeys maps each well-known label key to itself, held once.
var wellKnownKeys = func() map[string]string {
	m := map[string]string{}
	for _, k := range []string{
		discoveryv1.LabelManagedBy, discoveryv1.LabelServiceName,
		mcsv1beta1.LabelServiceName, mcsv1beta1.LabelSourceCluster,
		"mcsd.io/service-namespace",
	} {
		m[k] = k
	}
	return m
}()

// ConfigMap is an informer transform for ConfigMaps read for their data,
// such as ClusterSetIP block claims and member declarations: it keeps the
// name, namespace, labels, resourceVersion and creationTimestamp (claims
// are ordered by them) and the data. Never write back an object this
// transform made.
func ConfigMap(obj any) (any, error) {
	cm, ok := obj.(*corev1.ConfigMap)
	if !ok {
		return ManagedFields(obj)
	}
	m := identity(&cm.ObjectMeta)
	m.CreationTimestamp = cm.CreationTimestamp
	return &corev1.ConfigMap{ObjectMeta: m, Data: cm.Data}, nil
}

// identity is what a trimmed object keeps of its metadata: its name,
// namespace, labels (see Labels) and resourceVersion.
func identity(m *metav1.ObjectMeta) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: m.Name, Namespace: m.Namespace, Labels: SharedLabels(m.Labels), ResourceVersion: m.ResourceVersion}
}
