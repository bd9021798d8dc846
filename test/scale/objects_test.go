package scale

import (
	"encoding/json"
	"fmt"
	"runtime"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/mcsd-io/mcsd/broker"
	"github.com/mcsd-io/mcsd/importer"
	"github.com/mcsd-io/mcsd/internal/cacheobj"
	"github.com/mcsd-io/mcsd/internal/record"
	"github.com/mcsd-io/mcsd/mcsslice"
)

// BenchmarkCacheObjects prints, for each object mcsd caches per export or
// per service, the live heap one takes in an informer's store after that
// cache's transform (B/cached), and its size as the API server stores it
// (B/stored: JSON for the export records and ServiceImports, custom
// resources; protobuf for EndpointSlices), without etcd's key and
// bookkeeping. The objects are of the clusterset benchmark's shape (one TCP
// port, IPv4, ready endpoints) and pass through JSON first, as a watch
// decodes them, so that their strings are their own. docs/scale.md's cost
// model rests on these figures.
func BenchmarkCacheObjects(b *testing.B) {
	const objects = 5000
	memberNS := record.MemberNamespace(broker.DefaultNamespace, "cluster-042")
	onlyMembers := func(t cache.TransformFunc) cache.TransformFunc {
		return record.OnlyMembers(broker.DefaultNamespace, t)
	}
	type kind struct {
		name      string
		make      func(i int) any
		transform cache.TransformFunc
	}
	kinds := []kind{
		{"record/exporter", func(i int) any { return brokerRecord(memberNS, i) }, onlyMembers(cacheobj.ManagedFields)},
		{"record/importer", func(i int) any { return brokerRecord(memberNS, i) }, onlyMembers(record.CacheTransform)},
	}
	for _, eps := range []int{1, 10, 100} {
		kinds = append(kinds,
			kind{fmt.Sprintf("broker-slice-%d/importer", eps), func(i int) any { return brokerSlice(memberNS, i, eps) }, onlyMembers(cacheobj.RemoteEndpointSlice)},
			kind{fmt.Sprintf("mcs-slice-%d/node-agent", eps), func(i int) any { return mcsSlice(i, eps) },
				cacheobj.DataPlaneSlice(mcsslice.ServicePortsAnnotation, corev1.EndpointsLastChangeTriggerTime)},
			kind{fmt.Sprintf("mcs-slice-%d/controller", eps), func(i int) any { return mcsSlice(i, eps) }, importer.TrimOwnSlice},
			kind{fmt.Sprintf("mcs-slice-%d/whole", eps), func(i int) any { return mcsSlice(i, eps) }, cacheobj.ManagedFields},
		)
	}
	for _, clusters := range []int{3, 100} {
		kinds = append(kinds, kind{fmt.Sprintf("serviceimport-%d-clusters", clusters), func(i int) any { return serviceImport(i, clusters) }, cacheobj.ManagedFields})
	}
	for _, k := range kinds {
		b.Run(k.name, func(b *testing.B) {
			for b.Loop() {
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				store := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
				for i := range objects {
					obj, err := k.transform(k.make(i))
					if err != nil {
						b.Fatal(err)
					}
					if err := store.Add(obj); err != nil {
						b.Fatal(err)
					}
				}
				runtime.GC()
				runtime.ReadMemStats(&after)
				b.ReportMetric((float64(after.HeapAlloc)-float64(before.HeapAlloc))/objects, "B/cached")
				b.ReportMetric(float64(storedSize(b, k.make(7))), "B/stored")
				runtime.KeepAlive(store)
			}
		})
	}
}

// storedSize is the size of obj as the API server stores it.
func storedSize(b *testing.B, obj any) int {
	var data []byte
	var err error
	if s, ok := obj.(*discoveryv1.EndpointSlice); ok {
		data, err = s.Marshal()
	} else {
		data, err = json.Marshal(obj)
	}
	if err != nil {
		b.Fatal(err)
	}
	return len(data)
}

// decoded is obj after a trip through JSON, with what the API server sets
// on every object (uid, resourceVersion, creation time, one managedFields
// entry).
func decoded[T any, P interface {
	*T
	metav1.Object
}](obj P, i int) P {
	created := metav1.NewTime(time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC))
	obj.SetUID(types.UID(fmt.Sprintf("2b1c3d4e-5f60-4718-9a2b-%012d", i)))
	obj.SetResourceVersion(strconv.Itoa(1000000 + i))
	obj.SetCreationTimestamp(created)
	obj.SetManagedFields([]metav1.ManagedFieldsEntry{{Manager: "mcsd", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1", Time: &created, FieldsType: "FieldsV1"}})
	data, err := json.Marshal(obj)
	if err != nil {
		panic(err)
	}
	out := P(new(T))
	if err := json.Unmarshal(data, out); err != nil {
		panic(err)
	}
	return out
}

func serviceName(i int) (namespace, name string) {
	return fmt.Sprintf("scale-%02d", i%namespaces), fmt.Sprintf("svc-%05d", i)
}

func brokerRecord(memberNS string, i int) *mcsv1beta1.ServiceImport {
	ns, name := serviceName(i)
	r := record.Encode(record.Export{
		Cluster: "cluster-042", Namespace: ns, Name: name, Created: exportCreated,
		Type: mcsv1beta1.ClusterSetIP, Ports: []mcsv1beta1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}},
		IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol}, VIPs: []string{fmt.Sprintf("243.42.%d.%d", i>>8&255, i&255)},
	})
	r.Namespace = memberNS
	return decoded(r, i)
}

var exportCreated = metav1.NewTime(time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC))

func readyEndpoints(i, n int) []discoveryv1.Endpoint {
	eps := make([]discoveryv1.Endpoint, n)
	for e := range eps {
		eps[e] = discoveryv1.Endpoint{
			Addresses:  []string{endpointOf(42, (i*n+e)%(250*256)).String()},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true), Serving: ptr.To(true), Terminating: ptr.To(false)},
		}
	}
	return eps
}

func httpTargetPort() []discoveryv1.EndpointPort {
	return []discoveryv1.EndpointPort{{Name: ptr.To("http"), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To[int32](8080)}}
}

func brokerSlice(memberNS string, i, endpoints int) *discoveryv1.EndpointSlice {
	ns, name := serviceName(i)
	return decoded(&discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: memberNS,
			Name:      record.EndpointSliceName("cluster-042", ns, name, discoveryv1.AddressTypeIPv4, 0),
			Labels:    record.EndpointSliceLabels("cluster-042", ns, name),
		},
		AddressType: discoveryv1.AddressTypeIPv4, Ports: httpTargetPort(), Endpoints: readyEndpoints(i, endpoints),
	}, i)
}

// mcsSlice is an EndpointSlice as the importer writes it in a member.
func mcsSlice(i, endpoints int) *discoveryv1.EndpointSlice {
	ns, name := serviceName(i)
	return decoded(&discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:       ns,
			Name:            name + ".cluster-042.ipv4-0",
			Labels:          mcsslice.Labels(name, "cluster-042"),
			Annotations:     map[string]string{mcsslice.ServicePortsAnnotation: `{"http/TCP":80}`},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "multicluster.x-k8s.io/v1beta1", Kind: "ServiceImport", Name: name, UID: "5e0c1d2f-3a4b-4c5d-8e6f-708192a3b4c5", Controller: ptr.To(true)}},
		},
		AddressType: discoveryv1.AddressTypeIPv4, Ports: httpTargetPort(), Endpoints: readyEndpoints(i, endpoints),
	}, i)
}

// serviceImport is a merged ServiceImport as the importer writes it, with
// clusters in its status.
func serviceImport(i, clusters int) *mcsv1beta1.ServiceImport {
	ns, name := serviceName(i)
	si := &mcsv1beta1.ServiceImport{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Annotations: map[string]string{importer.AnnotationImportedKeys: ""}},
		Spec: mcsv1beta1.ServiceImportSpec{
			Type: mcsv1beta1.ClusterSetIP, IPs: []string{fmt.Sprintf("243.0.%d.%d", i>>8&255, i&255)}, IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol},
			Ports: []mcsv1beta1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}}, SessionAffinity: corev1.ServiceAffinityNone,
		},
	}
	for c := range clusters {
		si.Status.Clusters = append(si.Status.Clusters, mcsv1beta1.ClusterStatus{Cluster: fmt.Sprintf("cluster-%03d", c)})
	}
	si.Status.Conditions = []metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Ready", LastTransitionTime: exportCreated}}
	return decoded(si, i)
}
