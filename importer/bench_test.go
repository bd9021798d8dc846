package importer_test

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
	mcsclient "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned"
	mcsinformers "sigs.k8s.io/mcs-api/pkg/client/informers/externalversions"

	"github.com/mcsd-io/mcsd/broker"
	"github.com/mcsd-io/mcsd/internal/record"
	"github.com/mcsd-io/mcsd/mcsslice"
	"github.com/mcsd-io/mcsd/test/lib/fixture"
	"github.com/mcsd-io/mcsd/test/lib/harness"
	"github.com/mcsd-io/mcsd/vipalloc"
)

// firstSeen records when each key was first seen satisfying a condition.
type firstSeen struct {
	mu   sync.Mutex
	seen map[string]time.Time
}

func (f *firstSeen) mark(key string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.seen[key]; !ok {
		f.seen[key] = time.Now()
	}
}

func (f *firstSeen) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.seen)
}

// percentiles returns the p50 and p99 of the latencies from created to
// seen.
func percentiles(created map[string]time.Time, seen *firstSeen) (p50, p99 time.Duration) {
	seen.mu.Lock()
	defer seen.mu.Unlock()
	var lat []time.Duration
	for k, c := range created {
		if s, ok := seen.seen[k]; ok {
			lat = append(lat, s.Sub(c))
		}
	}
	if len(lat) == 0 {
		return 0, 0
	}
	slices.Sort(lat)
	at := func(q float64) time.Duration { return lat[min(len(lat)-1, int(q*float64(len(lat))))] }
	return at(0.50), at(0.99)
}

// BenchmarkExportToImport measures, over 200 services exported by
// cluster1, the time from creating a ServiceExport to the export record on
// the broker (the exporter's part) and to a ServiceImport with its VIP in
// cluster2 (the whole path).
func BenchmarkExportToImport(b *testing.B) {
	const services = 200
	cs := harness.Start(b, harness.Options{Clusters: 3})
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	members := fixture.Join(b, cs)
	for _, m := range members {
		fixture.StartExporter(b, m, fixture.ExporterOptions{})
		fixture.StartImporter(b, m, fixture.ImporterOptions{})
	}
	c1, c2 := members[0], members[1]

	b.ResetTimer()
	for round := 0; round < b.N; round++ {
		b.StopTimer()
		ns := "bench-" + strconv.Itoa(round)
		for _, m := range members {
			if _, err := m.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
				b.Fatal(err)
			}
		}
		for i := range services {
			svc := fixture.WebService(ns, fmt.Sprintf("svc-%03d", i), "none")
			if _, err := c1.Kube.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
				b.Fatal(err)
			}
		}

		onBroker := &firstSeen{seen: map[string]time.Time{}}
		imported := &firstSeen{seen: map[string]time.Time{}}
		watchCtx, stopWatching := context.WithCancel(ctx)
		brokerInf := mcsinformers.NewSharedInformerFactoryWithOptions(cs.Broker.MCS, 0, mcsinformers.WithNamespace(c1.BrokerNamespace()))
		recordHandler := func(obj any) {
			si, ok := obj.(*mcsv1beta1.ServiceImport)
			if ok && si.Labels[record.LabelServiceNamespace] == ns && si.Labels[record.LabelSourceCluster] == c1.ID {
				onBroker.mark(si.Labels[record.LabelServiceName])
			}
		}
		_, _ = brokerInf.Multicluster().V1beta1().ServiceImports().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc: recordHandler, UpdateFunc: func(_, obj any) { recordHandler(obj) },
		})
		localInf := mcsinformers.NewSharedInformerFactoryWithOptions(c2.MCS, 0, mcsinformers.WithNamespace(ns))
		importHandler := func(obj any) {
			if si, ok := obj.(*mcsv1beta1.ServiceImport); ok && len(si.Spec.IPs) > 0 {
				imported.mark(si.Name)
			}
		}
		_, _ = localInf.Multicluster().V1beta1().ServiceImports().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc: importHandler, UpdateFunc: func(_, obj any) { importHandler(obj) },
		})
		brokerInf.Start(watchCtx.Done())
		localInf.Start(watchCtx.Done())
		brokerInf.WaitForCacheSync(watchCtx.Done())
		localInf.WaitForCacheSync(watchCtx.Done())

		b.StartTimer()
		created := map[string]time.Time{}
		for i := range services {
			name := fmt.Sprintf("svc-%03d", i)
			created[name] = time.Now()
			se := &mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
			if _, err := c1.MCS.MulticlusterV1beta1().ServiceExports(ns).Create(ctx, se, metav1.CreateOptions{}); err != nil {
				b.Fatal(err)
			}
		}
		err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 5*time.Minute, true, func(context.Context) (bool, error) {
			return imported.count() == services && onBroker.count() == services, nil
		})
		b.StopTimer()
		stopWatching()
		if err != nil {
			b.Fatalf("only %d of %d services reached the broker and %d were imported into cluster2", onBroker.count(), services, imported.count())
		}
		rp50, rp99 := percentiles(created, onBroker)
		ip50, ip99 := percentiles(created, imported)
		b.ReportMetric(rp50.Seconds()*1000, "export-to-record-p50-ms")
		b.ReportMetric(rp99.Seconds()*1000, "export-to-record-p99-ms")
		b.ReportMetric(ip50.Seconds()*1000, "export-to-import-p50-ms")
		b.ReportMetric(ip99.Seconds()*1000, "export-to-import-p99-ms")
		b.Logf("%d services: ServiceExport -> broker record p50 %v p99 %v; -> ServiceImport with VIP in cluster2 p50 %v p99 %v",
			services, rp50.Round(time.Millisecond), rp99.Round(time.Millisecond), ip50.Round(time.Millisecond), ip99.Round(time.Millisecond))
	}
}

// benchServices is the number of services BenchmarkImportAtScale imports,
// MCSD_BENCH_SERVICES to override (default 10000).
func benchServices(b *testing.B) int {
	if v := os.Getenv("MCSD_BENCH_SERVICES"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			b.Fatalf("MCSD_BENCH_SERVICES=%q is not a positive number", v)
		}
		return n
	}
	return 10000
}

// BenchmarkImportAtScale writes the records, EndpointSlices and Leases of
// N services exported by three clusters to the broker, as their exporters
// would, then starts one importer and measures how long it takes to write
// every ServiceImport (with status) and every EndpointSlice, and the
// memory it holds then.
func BenchmarkImportAtScale(b *testing.B) {
	n := benchServices(b)
	const namespaces = 20
	clusters := []string{"cluster1", "remote-b", "remote-c"}
	cs := harness.Start(b, harness.Options{Clusters: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Minute)
	defer cancel()
	members := fixture.Join(b, cs)
	m := members[0]

	// The broker's writer stands in for three exporters: unthrottled.
	cfg := rest.CopyConfig(cs.Broker.Config)
	cfg.QPS = -1
	kube := kubernetes.NewForConfigOrDie(cfg)
	mcs := mcsclient.NewForConfigOrDie(cfg)
	for i := range namespaces {
		if _, err := m.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("scale-%02d", i)}}, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	// The remote clusters' heartbeats, renewed all along.
	renewCtx, stopRenewing := context.WithCancel(ctx)
	defer stopRenewing()
	for _, c := range clusters[1:] {
		fake := fixture.FakeExporter{Cluster: c, Kube: kube, MCS: mcs}
		go wait.UntilWithContext(renewCtx, func(ctx context.Context) { _ = fake.Renew(ctx) }, 2*time.Second)
	}

	// Each cluster allocates its VIPs from a block it claimed: importers
	// count no other (docs/importer.md, "Trust between members").
	vipBase := map[string][4]byte{clusters[0]: m.Blocks[corev1.IPv4Protocol].Addr().As4()}
	for i, c := range clusters[1:] {
		block := netip.PrefixFrom(netip.AddrFrom4([4]byte{243, byte(200 + i), 0, 0}), 16)
		claim := &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{
				Name:   vipalloc.ClaimName(c, corev1.IPv4Protocol),
				Labels: map[string]string{vipalloc.LabelClaim: "", mcsv1beta1.LabelSourceCluster: c},
			},
			Data: map[string]string{vipalloc.ClaimKey: block.String()},
		}
		if _, err := kube.CoreV1().ConfigMaps(broker.DefaultNamespace).Create(ctx, claim, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
		vipBase[c] = block.Addr().As4()
	}

	began := time.Now()
	err := fixture.InParallel(ctx, 32, n, func(ctx context.Context, i int) error {
		for ci, cluster := range clusters {
			fake := fixture.FakeExporter{Cluster: cluster, Kube: kube, MCS: mcs}
			if err := fake.Export(ctx, fixture.FakeService{
				Namespace: fmt.Sprintf("scale-%02d", i%namespaces), Name: fmt.Sprintf("svc-%05d", i),
				VIP:       vipFor(vipBase[cluster], i),
				Endpoints: []string{fmt.Sprintf("10.%d.%d.%d", 64+ci, (i/250)%250, i%250+1)},
			}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("wrote %d records, %d EndpointSlices to the broker in %v", 3*n, 3*n, time.Since(began).Round(time.Second))

	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)

	b.ResetTimer()
	start := time.Now()
	imp := fixture.StartImporter(b, m, fixture.ImporterOptions{NoWait: true, LocalQPS: 2000, Workers: 8})
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 50*time.Minute, true, func(context.Context) (bool, error) {
		return metricValue(imp.Registry, "mcsd_importer_local_writes_total", map[string]string{"kind": "serviceimport", "operation": "update-status"}) >= float64(n) &&
			metricValue(imp.Registry, "mcsd_importer_local_writes_total", map[string]string{"kind": "endpointslice", "operation": "create"}) >= float64(3*n), nil
	})
	took := time.Since(start)
	b.StopTimer()
	if err != nil {
		b.Fatalf("the importer did not converge: %v", err)
	}
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	rss := harness.UsageOf(os.Getpid()).RSS

	// What the writes say, checked against the cluster.
	var imports, readyImports, slicesSeen int
	for i := range namespaces {
		ns := fmt.Sprintf("scale-%02d", i)
		list, err := m.MCS.MulticlusterV1beta1().ServiceImports(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			b.Fatal(err)
		}
		for _, si := range list.Items {
			imports++
			if len(si.Status.Clusters) == 3 && len(si.Spec.IPs) == 1 {
				readyImports++
			}
		}
		sl, err := m.Kube.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelManagedBy + "=" + mcsslice.Manager})
		if err != nil {
			b.Fatal(err)
		}
		slicesSeen += len(sl.Items)
	}
	if imports != n || readyImports != n || slicesSeen != 3*n {
		b.Fatalf("%d ServiceImports (%d with 3 clusters and a VIP), %d EndpointSlices; want %d, %d", imports, readyImports, slicesSeen, n, 3*n)
	}
	heap := float64(after.HeapInuse) - float64(before.HeapInuse)
	b.ReportMetric(took.Seconds(), "converge-s")
	b.ReportMetric(float64(n)/took.Seconds(), "services/s")
	b.ReportMetric(heap/(1<<20), "importer-heap-MiB")
	b.ReportMetric(float64(rss)/(1<<20), "process-rss-MiB")
	b.Logf("%d services x 3 clusters: importer wrote %d ServiceImports and %d EndpointSlices in %v (%.0f services/s); heap held by the importer %.1f MiB (%.1f KiB/service), process RSS %.1f MiB",
		n, n, 3*n, took.Round(time.Millisecond), float64(n)/took.Seconds(), heap/(1<<20), heap/1024/float64(n), float64(rss)/(1<<20))
	imp.Stop()
}

func vipFor(base [4]byte, i int) string {
	v := uint32(base[0])<<24 | uint32(base[1])<<16 | uint32(base[2])<<8 | uint32(base[3])
	v += uint32(i) + 1
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}).String()
}
