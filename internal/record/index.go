package record

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/mcsd-io/mcsd/internal/cacheobj"
)

// IndexByService names the index ServiceIndex makes in an informer of
// broker objects.
const IndexByService = "service"

// ServiceIndex indexes broker records and EndpointSlices of every cluster
// by the "<namespace>/<name>" of the Service they export, read from their
// labels, so that a controller finds one service's objects without
// scanning them all.
func ServiceIndex(obj any) ([]string, error) {
	l := cacheobj.LabelsOf(obj)
	ns, name := l[LabelServiceNamespace], l[LabelServiceName]
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
var ClusterIndex = LabelIndex(LabelSourceCluster)

// LabelIndex indexes objects by the value of their label, when they have
// it.
func LabelIndex(label string) cache.IndexFunc {
	return func(obj any) ([]string, error) {
		if v := cacheobj.LabelsOf(obj)[label]; v != "" {
			return []string{v}, nil
		}
		return nil, nil
	}
}

// NamespacedLabelIndex indexes namespaced objects by "<namespace>/<value of
// label>", when they have it: a local EndpointSlice by the Service it is
// named for.
func NamespacedLabelIndex(label string) cache.IndexFunc {
	return func(obj any) ([]string, error) {
		m, ok := cacheobj.Object[metav1.Object](obj)
		if !ok || m.GetLabels()[label] == "" {
			return nil, nil
		}
		return []string{ServiceKey(m.GetNamespace(), m.GetLabels()[label])}, nil
	}
}
