// Package scale measures the control plane at clusterset scale: many member
// clusters, each exporting thousands of services, imported by one real mcsd
// daemon running with its default settings. It only benchmarks; nothing in
// it passes or fails on time.
package scale

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	mcsclient "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned"

	"github.com/mcsd-io/mcsd/broker"
	"github.com/mcsd-io/mcsd/internal/record"
	"github.com/mcsd-io/mcsd/mcsslice"
	"github.com/mcsd-io/mcsd/test/lib/fixture"
	"github.com/mcsd-io/mcsd/test/lib/harness"
)

// namespaces the services are spread over.
const namespaces = 20

// headlessEvery: one service in this many is headless, so that DNS answers
// with endpoint addresses and shows when a cluster's endpoints leave.
const headlessEvery = 50

// BenchmarkClusterset runs each scenario of MCSD_SCALE (default
// "3x10000x1,50x1000x10": clusters x services x endpoints per service and
// cluster) on a fresh broker and member cluster, and prints one table row
// per scenario.
func BenchmarkClusterset(b *testing.B) {
	spec := os.Getenv("MCSD_SCALE")
	if spec == "" {
		spec = "3x10000x1,50x1000x10"
	}
	scenarios, err := parseScenarios(spec)
	if err != nil {
		b.Fatalf("MCSD_SCALE: %v", err)
	}
	var rows []result
	for _, sc := range scenarios {
		b.Run(sc.String(), func(b *testing.B) {
			for range b.N {
				rows = append(rows, run(b, sc))
			}
		})
	}
	printTable(os.Stdout, rows)
}

// run stands up one scenario and measures it.
func run(b *testing.B, sc scenario) result {
	res := result{scenario: sc, loadBefore: loadAverage()}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Minute)
	defer cancel()
	cs := harness.Start(b, harness.Options{Clusters: 1})
	// The member's budget on the broker holds every service (the default
	// is a few thousand), within the etcd quota the worst case of a few
	// members needs.
	m := fixture.JoinWith(b, cs, broker.Settings{
		MaxMembers:     2,
		EtcdQuotaBytes: 8 << 30,
		MemberBudget:   broker.Budget{ServiceImports: sc.services, EndpointSlices: sc.services},
	})[0]
	if !m.PodCIDR.Contains(endpointOf(0, 0)) {
		b.Fatalf("the member's pod CIDR %s does not hold its endpoints %s", m.PodCIDR, endpointOf(0, 0))
	}
	if block := m.Blocks[corev1.IPv4Protocol]; !block.Contains(vipOf(0)) || !block.Contains(vipOf(sc.services-1)) {
		b.Fatalf("the member claimed %s, which does not hold the services' VIPs %s-%s", block, vipOf(0), vipOf(sc.services-1))
	}
	node, err := m.AddNode(ctx)
	if err != nil {
		b.Fatal(err)
	}
	for i := range namespaces {
		if _, err := m.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespaceOf(i)}}, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
	}

	// The simulated clusters write as fast as the broker takes it: they
	// stand in for many exporters at once. The member's own ID is one of
	// them (its exporter does not run), the others renew their Leases.
	cfg := rest.CopyConfig(cs.Broker.Config)
	cfg.QPS = -1
	brokerKube, brokerMCS := kubernetes.NewForConfigOrDie(cfg), mcsclient.NewForConfigOrDie(cfg)
	clusters := []string{m.ID}
	for i := 2; i <= sc.clusters; i++ {
		clusters = append(clusters, fmt.Sprintf("member-%02d", i))
	}
	heartbeats := map[string]*heartbeat{}
	for _, c := range clusters[1:] {
		heartbeats[c] = startHeartbeat(ctx, fixture.FakeExporter{Cluster: c, Kube: brokerKube, MCS: brokerMCS})
	}
	defer func() {
		for _, hb := range heartbeats {
			hb.stop()
		}
	}()
	began := time.Now()
	err = fixture.InParallel(ctx, 32, sc.services, func(ctx context.Context, i int) error {
		for ci, c := range clusters {
			fake := fixture.FakeExporter{Cluster: c, Kube: brokerKube, MCS: brokerMCS}
			if err := fake.Export(ctx, sc.service(i, ci)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	res.brokerWrite = time.Since(began)
	res.brokerDB = cs.Broker.EtcdDBSize()
	b.Logf("%s: %d records and %d EndpointSlices written to the broker in %v", sc, sc.services*sc.clusters, sc.services*sc.clusters, res.brokerWrite.Round(time.Second))

	// The limit beside the importer: the same writes to the same API
	// server by a plain client at the importer's concurrency, before mcsd
	// starts (and gone again when it does).
	plainCPU := m.APIServerUsage().CPU
	res.plainWrite, err = plainImportAll(ctx, m, sc, clusters)
	if err != nil {
		b.Fatal(err)
	}
	res.plainAPIServerCPU = m.APIServerUsage().CPU - plainCPU
	b.Logf("%s: the plain writer imported everything in %v", sc, res.plainWrite.Round(time.Millisecond))

	// kube-proxy's memory on the same services and endpoints as plain
	// Services and EndpointSlices, also before mcsd starts (and gone
	// again when it does): the reference for the data plane's.
	if bin := os.Getenv(kubeProxyBinaryEnv); bin != "" {
		kp, err := kubeProxyOnSameObjects(ctx, cs, m, bin, sc, clusters)
		if err != nil {
			b.Fatalf("kube-proxy: %v", err)
		}
		res.kubeProxy = &kp
		b.Logf("%s: kube-proxy synced every service in %v; RSS %s (peak %s)", sc, kp.synced.Round(time.Millisecond), mib(kp.usage.RSS), mib(kp.usage.PeakRSS))
	} else {
		b.Logf("kube-proxy: not run (%s is not set; make bench-scale sets it)", kubeProxyBinaryEnv)
	}

	// mcsd with its defaults, as two processes so that each one's memory
	// is measured: the importer (the elected replica's job) and a node's
	// data plane (every replica's). One process running both shares the
	// cache of ServiceImports and MCS slices between them.
	start := time.Now()
	cpuBefore := map[string]time.Duration{
		"member apiserver": m.APIServerUsage().CPU, "member etcd": m.EtcdUsage().CPU,
		"broker apiserver": cs.Broker.APIServerUsage().CPU, "broker etcd": cs.Broker.EtcdUsage().CPU,
	}
	// MCSD_SCALE_ARGS adds flags to both processes, for diagnosis (such as
	// --v=4); the table's figures are those of the defaults only without it.
	extra := strings.Fields(os.Getenv("MCSD_SCALE_ARGS"))
	profiles := os.Getenv("MCSD_SCALE_PROFILES")
	if profiles != "" {
		extra = append(extra, "--profiling")
	}
	d, err := fixture.RunDaemon(ctx, cs, m, node, fixture.DaemonOptions{Name: "mcsd-importer", Defaults: true, Args: append([]string{"--components=importer"}, extra...)})
	if d != nil {
		defer func() { _ = d.Terminate(30 * time.Second) }()
	}
	if err != nil {
		b.Fatal(err)
	}
	dp, err := fixture.RunDaemon(ctx, cs, m, node, fixture.DaemonOptions{Name: "mcsd-dataplane", Defaults: true, Args: append([]string{"--components=dns,proxier"}, extra...)})
	if dp != nil {
		defer func() { _ = dp.Terminate(30 * time.Second) }()
	}
	if err != nil {
		b.Fatal(err)
	}
	metrics := &scraper{url: d.Metrics}
	want := map[string]float64{
		writes("serviceimport", "update-status"): float64(sc.services),
		writes("endpointslice", "create"):        float64(sc.services * sc.clusters),
	}
	if err := metrics.waitFor(ctx, 250*time.Millisecond, func(s sample) bool { return s.atLeast(want) }); err != nil {
		b.Fatalf("the importer did not converge: %v\n%s", err, d.Tail(30))
	}
	if err := waitImported(ctx, m, sc); err != nil {
		b.Fatal(err)
	}
	res.converge = time.Since(start)
	final, err := metrics.scrape(ctx)
	if err != nil {
		b.Fatal(err)
	}
	res.writesPerService = final.sum("mcsd_importer_local_writes_total", nil) / float64(sc.services)
	res.daemon = d.Usage()
	res.dataPlane = dp.Usage()
	res.brokerAPIServer = cs.Broker.APIServerUsage()
	res.memberAPIServer = m.APIServerUsage()
	res.cpu = map[string]time.Duration{
		"importer": res.daemon.CPU, "data plane": res.dataPlane.CPU,
		"member apiserver": res.memberAPIServer.CPU - cpuBefore["member apiserver"],
		"member etcd":      m.EtcdUsage().CPU - cpuBefore["member etcd"],
		"broker apiserver": res.brokerAPIServer.CPU - cpuBefore["broker apiserver"],
		"broker etcd":      cs.Broker.EtcdUsage().CPU - cpuBefore["broker etcd"],
	}
	res.brokerDB = cs.Broker.EtcdDBSize()
	b.Logf("%s: imported in %v; importer RSS %s (peak %s)", sc, res.converge.Round(time.Millisecond), mib(res.daemon.RSS), mib(res.daemon.PeakRSS))
	if profiles != "" {
		for name, daemon := range map[string]*fixture.Daemon{"importer": d, "dataplane": dp} {
			path := filepath.Join(profiles, sc.String()+"-"+name+"-heap.pprof")
			if err := saveProfile(ctx, strings.TrimSuffix(daemon.Metrics, "/metrics")+"/debug/pprof/heap", path); err != nil {
				b.Fatal(err)
			}
			b.Logf("heap profile of mcsd's %s: %s", name, path)
		}
	}

	// The data plane must have everything before a cluster can leave it.
	probe := newDropProbe(node, sc)
	if err := probe.waitServed(ctx); err != nil {
		b.Fatalf("%v\n%s", err, dp.Tail(30))
	}
	res.dataPlane = dp.Usage()

	// One cluster dies: its heartbeat stops.
	beforeDeath, err := metrics.scrape(ctx)
	if err != nil {
		b.Fatal(err)
	}
	dpMetrics := &scraper{url: dp.Metrics}
	syncsBefore, err := dpMetrics.scrape(ctx)
	if err != nil {
		b.Fatal(err)
	}
	dead := heartbeats[clusters[1]]
	dead.stop()
	// The last renewal is what the broker holds: a renewal whose answer
	// the stop cut off may still have been written.
	lease, err := brokerKube.CoordinationV1().Leases(record.MemberNamespace(broker.DefaultNamespace, clusters[1])).Get(ctx, record.LeaseName(clusters[1]), metav1.GetOptions{})
	if err != nil || lease.Spec.RenewTime == nil {
		b.Fatalf("reading the dead cluster's Lease: %v", err)
	}
	last := lease.Spec.RenewTime.Time
	var probeErrs []string
	res.dnsGone, res.nftGone, probeErrs, err = probe.waitGone(ctx, last)
	for _, e := range probeErrs {
		b.Logf("%s: probing the data plane: %s", sc, e)
	}
	if err != nil {
		b.Fatalf("%v\n%s", err, d.Tail(30))
	}
	if syncsAfter, err := dpMetrics.scrape(ctx); err == nil {
		const partial = "mcsd_proxier_sync_partial_proxy_rules_duration_seconds"
		n := syncsAfter.sum(partial+"_count", nil) - syncsBefore.sum(partial+"_count", nil)
		if n > 0 {
			res.partialSync = time.Duration((syncsAfter.sum(partial+"_sum", nil) - syncsBefore.sum(partial+"_sum", nil)) / n * float64(time.Second))
		}
	}
	res.cleanupRate, res.cleanup, err = cleanupRate(ctx, metrics, last, sc, beforeDeath)
	if err != nil {
		b.Fatal(err)
	}
	// A broker outage, with one cluster dead by now.
	res.flipWrites, res.flipConfigMapWrites, err = brokerFlip(ctx, cs, metrics, sc)
	if err != nil {
		b.Fatalf("broker flip: %v\n%s", err, d.Tail(30))
	}

	// Memory once the bursts are over: the Go runtime hands freed memory
	// back to the system over minutes, not at once.
	res.daemonSteady = d.Usage()
	res.loadAfter = loadAverage()
	if profiles != "" {
		for name, daemon := range map[string]*fixture.Daemon{"importer": d, "dataplane": dp} {
			if data, err := os.ReadFile(daemon.LogPath()); err == nil {
				_ = os.WriteFile(filepath.Join(profiles, sc.String()+"-"+name+".log"), data, 0o644)
			}
		}
	}
	return res
}

// saveProfile writes what url serves to path.
func saveProfile(ctx context.Context, url, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func namespaceOf(i int) string { return fmt.Sprintf("scale-%02d", i%namespaces) }

// waitImported checks the cluster itself: every ServiceImport with every
// cluster in its status, and every slice.
func waitImported(ctx context.Context, m *fixture.Member, sc scenario) error {
	var imports, complete, slices int
	err := wait.PollUntilContextTimeout(ctx, time.Second, 10*time.Minute, true, func(ctx context.Context) (bool, error) {
		imports, complete, slices = 0, 0, 0
		for i := range namespaces {
			list, err := m.MCS.MulticlusterV1beta1().ServiceImports(namespaceOf(i)).List(ctx, metav1.ListOptions{ResourceVersion: "0"})
			if err != nil {
				return false, nil
			}
			for _, si := range list.Items {
				imports++
				if len(si.Status.Clusters) == sc.clusters {
					complete++
				}
			}
			sl, err := m.Kube.DiscoveryV1().EndpointSlices(namespaceOf(i)).List(ctx, metav1.ListOptions{
				ResourceVersion: "0",
				LabelSelector:   discoveryv1.LabelManagedBy + "=" + mcsslice.Manager,
			})
			if err != nil {
				return false, nil
			}
			slices += len(sl.Items)
		}
		return imports == sc.services && complete == sc.services && slices == sc.services*sc.clusters, nil
	})
	if err != nil {
		return fmt.Errorf("%d ServiceImports (%d with all %d clusters), %d EndpointSlices; want %d and %d",
			imports, complete, sc.clusters, slices, sc.services, sc.services*sc.clusters)
	}
	return nil
}

// heartbeat renews a simulated cluster's Lease every 2 s, as a heartbeat
// with the default 10 s lease does.
type heartbeat struct {
	cancel context.CancelFunc
	done   chan struct{}
}

func startHeartbeat(ctx context.Context, fake fixture.FakeExporter) *heartbeat {
	ctx, cancel := context.WithCancel(ctx)
	hb := &heartbeat{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(hb.done)
		wait.UntilWithContext(ctx, func(ctx context.Context) {
			// A renewal stuck on a broken connection must not hold up the
			// next one, as the heartbeat's own renewals do not.
			ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			_ = fake.Renew(ctx)
		}, 2*time.Second)
	}()
	return hb
}

// stop ends the heartbeat.
func (hb *heartbeat) stop() {
	hb.cancel()
	<-hb.done
}

// brokerFlip stops the broker's API server until the importer notices,
// starts it again, waits until every service was synced once more, and
// returns the importer's writes of ServiceImports and slices in between,
// and those of the liveness ConfigMap.
func brokerFlip(ctx context.Context, cs *harness.ClusterSet, metrics *scraper, sc scenario) (objects, configMaps float64, err error) {
	before, err := metrics.scrape(ctx)
	if err != nil {
		return 0, 0, err
	}
	cs.Broker.StopAPIServer()
	reachable := func(v float64) func(sample) bool {
		return func(s sample) bool { return s.sum("mcsd_importer_broker_reachable", nil) == v }
	}
	if err := metrics.waitFor(ctx, 100*time.Millisecond, reachable(0)); err != nil {
		_ = cs.Broker.StartAPIServer(ctx)
		return 0, 0, fmt.Errorf("the importer never saw the broker down: %w", err)
	}
	if err := cs.Broker.StartAPIServer(ctx); err != nil {
		return 0, 0, err
	}
	synced := before.sum("mcsd_importer_syncs_total", nil) + float64(sc.services)
	if err := metrics.waitFor(ctx, 250*time.Millisecond, func(s sample) bool {
		return reachable(1)(s) && s.sum("mcsd_importer_syncs_total", nil) >= synced
	}); err != nil {
		return 0, 0, fmt.Errorf("the importer did not resync every service after the broker came back: %w", err)
	}
	after, err := metrics.scrape(ctx)
	if err != nil {
		return 0, 0, err
	}
	cm := map[string]string{"kind": "configmap"}
	total := after.sum("mcsd_importer_local_writes_total", nil) - before.sum("mcsd_importer_local_writes_total", nil)
	configMaps = after.sum("mcsd_importer_local_writes_total", cm) - before.sum("mcsd_importer_local_writes_total", cm)
	return total - configMaps, configMaps, nil
}

// cleanupRate is how many of the dead cluster's slices a second the
// importer deletes: all of them (one per service), from the moment it went.
func cleanupRate(ctx context.Context, metrics *scraper, since time.Time, sc scenario, before sample) (float64, time.Duration, error) {
	deleted := func(s sample) float64 {
		return s.sum(writes("endpointslice", "delete"), nil) - before.sum(writes("endpointslice", "delete"), nil)
	}
	if err := metrics.waitFor(ctx, 250*time.Millisecond, func(s sample) bool { return deleted(s) >= float64(sc.services) }); err != nil {
		return 0, 0, fmt.Errorf("the dead cluster's slices were not all deleted: %w", err)
	}
	took := time.Since(since)
	return float64(sc.services) / took.Seconds(), took, nil
}

// service is the i-th service as cluster ci exports it.
func (sc scenario) service(i, ci int) fixture.FakeService {
	svc := fixture.FakeService{Namespace: namespaceOf(i), Name: fmt.Sprintf("svc-%05d", i)}
	if i%headlessEvery != 0 {
		svc.VIP = vipOf(i).String()
	}
	for e := range sc.endpoints {
		svc.Endpoints = append(svc.Endpoints, endpointOf(ci, i*sc.endpoints+e).String())
	}
	return svc
}

// vipOf is the ClusterSetIP of the i-th service, from the block the
// member (the first cluster, which exports every service) claimed when it
// joined the fresh broker: importers accept a VIP only from its owner's
// block, or as a copy of a VIP its owner holds for the same service.
func vipOf(i int) netip.Addr {
	i++ // never the block's network address
	return netip.AddrFrom4([4]byte{243, byte(i >> 16), byte(i >> 8), byte(i)})
}

// endpointOf is the k-th endpoint address of cluster ci: 100.(65+ci)/16,
// so that a cluster's endpoints are told apart by their prefix, and the
// member's (ci 0) lie in the pod CIDR the broker declared for it (the
// harness gives cluster1 100.65.0.0/16); the simulated clusters have no
// declaration, and importers keep such clusters' endpoints. Past the 63
// /16s left in 100.64.0.0/10, a cluster's endpoints are in 240.0.0.0/8,
// reserved and never routed (the API server accepts it; the ClusterSetIPs
// are in 243.0.0.0/8): nothing is ever sent to these addresses.
func endpointOf(ci, k int) netip.Addr {
	if ci < cgnatClusters {
		return netip.AddrFrom4([4]byte{100, byte(65 + ci), byte(k / 250), byte(k%250 + 1)})
	}
	return netip.AddrFrom4([4]byte{240, byte(ci - cgnatClusters), byte(k / 250), byte(k%250 + 1)})
}

const (
	// cgnatClusters is how many clusters' endpoints fit in 100.65.0.0 to
	// 100.127.255.255, a /16 each.
	cgnatClusters = 63
	// maxClusters is how many fit in all.
	maxClusters = cgnatClusters + 256
)

func writes(kind, operation string) string {
	return `mcsd_importer_local_writes_total{kind="` + kind + `",operation="` + operation + `"}`
}

func loadAverage() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	return strings.Join(strings.Fields(string(data))[:3], " ")
}
