package record

import (
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/tools/cache"
)

// IndexByService names the index ServiceIndex makes in an informer of
// broker objects.
const IndexByService = "service"

// ServiceIndex indexes broker records and EndpointSlices of every cluster
// by the "<namespace>/<name>" of the Service they export, read from their
// labels, so that a controller finds one service's objects without
// scanning them all.
func ServiceIndex(obj any) ([]string, error) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return nil, nil
	}
	ns, name := m.GetLabels()[LabelServiceNamespace], m.GetLabels()[LabelServiceName]
	if ns == "" || name == "" {
		return nil, nil
	}
	return []string{ServiceKey(ns, name)}, nil
}

// ServiceKey is the ServiceIndex key of a Service.
func ServiceKey(namespace, name string) string { return namespace + "/" + name }

// IndexByCluster names the index ClusterIndex makes in an informer of
// broker objects.
const IndexByCluster = "cluster"

// ClusterIndex indexes broker objects by the cluster that wrote them, read
// from their LabelSourceCluster.
func ClusterIndex(obj any) ([]string, error) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return nil, nil
	}
	if cluster := m.GetLabels()[LabelSourceCluster]; cluster != "" {
		return []string{cluster}, nil
	}
	return nil, nil
}
