package dns

import (
	"fmt"
	"net/netip"
	"runtime"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/klog/v2"
)

// BenchmarkIndexMemory prints the live heap an Index with a server's packed
// answers holds per service and per endpoint, at the shapes of the
// clusterset benchmark (clusters x services x endpoints per cluster, one
// service in 50 headless). The EndpointSlices are dropped once fed, as the
// informer's cache holds them apart from the Index.
func BenchmarkIndexMemory(b *testing.B) {
	for _, shape := range []struct{ clusters, services, endpoints int }{{3, 10000, 1}, {50, 1000, 10}} {
		b.Run(fmt.Sprintf("%dx%dx%d", shape.clusters, shape.services, shape.endpoints), func(b *testing.B) {
			for b.Loop() {
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				idx := NewIndex(klog.Background())
				srv, err := New(Config{Index: idx, LocalCluster: "c0", Registerer: prometheus.NewRegistry(), Logger: klog.Background()})
				if err != nil {
					b.Fatal(err)
				}
				for i := range shape.services {
					ns, name := fmt.Sprintf("ns-%02d", i%20), fmt.Sprintf("svc-%05d", i)
					if i%50 == 0 {
						idx.setImport(headlessImport(ns, name, port("http", corev1.ProtocolTCP, 80)))
					} else {
						vip := netip.AddrFrom4([4]byte{243, 0, byte(i >> 8), byte(i)})
						idx.setImport(clusterSetImport(ns, name, []string{vip.String()}, port("http", corev1.ProtocolTCP, 80)))
					}
					for c := range shape.clusters {
						var eps []discoveryv1.Endpoint
						for e := range shape.endpoints {
							k := i*shape.endpoints + e
							eps = append(eps, endpoint("", netip.AddrFrom4([4]byte{100, byte(65 + c), byte(k / 250), byte(k%250 + 1)}).String()))
						}
						idx.setSlice(mcsSlice(ns, fmt.Sprintf("%s-c%d", name, c), name, fmt.Sprintf("c%d", c), eps...))
					}
				}
				idx.markSynced()
				runtime.GC()
				runtime.ReadMemStats(&after)
				heap := float64(after.HeapAlloc) - float64(before.HeapAlloc)
				b.ReportMetric(heap/(1<<20), "MiB")
				b.ReportMetric(heap/float64(shape.services), "B/service")
				b.ReportMetric(heap/float64(shape.services*shape.clusters*shape.endpoints), "B/endpoint")
				runtime.KeepAlive(srv)
			}
		})
	}
}
