package scale

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
	mcsclient "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned"

	"github.com/mcsd-io/mcsd/internal/quotaretry"
	"github.com/mcsd-io/mcsd/nsenter"
	"github.com/mcsd-io/mcsd/test/lib/fixture"
	"github.com/mcsd-io/mcsd/test/lib/harness"
	"github.com/mcsd-io/mcsd/test/lib/netns"
)

// bulkRounds: each side (the plain writer, mcsd) runs this many times,
// alternating, on the same clusters.
const bulkRounds = 3

// clientsOf are a cluster's clients.
type clientsOf struct {
	kube kubernetes.Interface
	mcs  mcsclient.Interface
}

// BenchmarkBulkExport creates MCSD_BULK (default 200) ServiceExports at
// once in one of three clusters, each with a real mcsd with its defaults
// (exporter, importer, DNS and proxier in one process), and prints when
// each service reached each stage in every cluster: its record and slice
// on the broker, its ServiceImport, status and slice in each member, and
// the answer of each member's DNS (given only once the node's proxier
// carries the ClusterSetIP). Beside it, a plain writer makes the same
// writes on the same API servers at the daemons' concurrency, with nothing
// in between; the two alternate, three rounds each.
func BenchmarkBulkExport(b *testing.B) {
	n := 200
	if s := os.Getenv("MCSD_BULK"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 1 {
			b.Fatalf("MCSD_BULK=%q: want a number of services", s)
		}
		n = v
	}
	// MCSD_BULK_WORKERS sets the daemons' exporter and importer workers
	// and the plain writer's concurrency alike (default 4, the daemon's).
	workers := 4
	var args []string
	if s := os.Getenv("MCSD_BULK_WORKERS"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 1 {
			b.Fatalf("MCSD_BULK_WORKERS=%q: want a number of workers", s)
		}
		workers = v
		args = []string{"--exporter-workers=" + s, "--importer-workers=" + s}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	cs := harness.Start(b, harness.Options{Clusters: 3})
	members := fixture.Join(b, cs)
	brokerAdmin := clientsOf{kubernetes.NewForConfigOrDie(cs.Broker.Config), mcsclient.NewForConfigOrDie(cs.Broker.Config)}
	var daemons []*fixture.Daemon
	for _, m := range members {
		node, err := m.AddNode(ctx)
		if err != nil {
			b.Fatal(err)
		}
		d, err := fixture.RunDaemon(ctx, cs, m, node, fixture.DaemonOptions{Name: "mcsd-" + m.ID, Defaults: true, Args: args})
		if d != nil {
			defer func() { _ = d.Terminate(30 * time.Second) }()
		}
		if err != nil {
			b.Fatal(err)
		}
		daemons = append(daemons, d)
	}
	loadBefore := loadAverage()
	var plain, mcsd []bulkResult
	for r := range bulkRounds {
		cpu, adm := cpuOf(cs, members, daemons), admissionOf(ctx, brokerAdmin)
		res, err := bulkPlain(ctx, brokerAdmin, members, n, r, workers)
		if err != nil {
			b.Fatalf("plain writer, round %d: %v", r+1, err)
		}
		res.cpu, res.admission = cpuOf(cs, members, daemons).minus(cpu), admissionOf(ctx, brokerAdmin).since(adm)
		plain = append(plain, res)
		b.Logf("round %d, plain writer: %v", r+1, res.total.Round(time.Millisecond))
		cpu, adm = cpuOf(cs, members, daemons), admissionOf(ctx, brokerAdmin)
		res, err = bulkMCSD(ctx, brokerAdmin, members, daemons, n, r)
		if err != nil {
			b.Fatalf("mcsd, round %d: %v\n%s", r+1, err, daemons[0].Tail(30))
		}
		res.cpu, res.admission = cpuOf(cs, members, daemons).minus(cpu), admissionOf(ctx, brokerAdmin).since(adm)
		mcsd = append(mcsd, res)
		b.Logf("round %d, mcsd: %v", r+1, res.total.Round(time.Millisecond))
	}
	printBulk(os.Stdout, n, workers, plain, mcsd, loadBefore, loadAverage())
}

// bulkResult is one round of one side: per stage, each service's latency
// from its ServiceExport's creation (the slowest cluster's), and the
// time from the first creation until the last service was imported
// everywhere, and until every DNS answered.
type bulkResult struct {
	perStage [stages][]time.Duration
	imported []time.Duration
	total    time.Duration
	dnsTotal time.Duration
	// cpu is what the round cost each part.
	cpu cpuUse
	// admission is the broker's mean time per create in its admission
	// plugins that take any.
	admission admission
	// failedExports and failedImports are the daemons' syncs that failed
	// and were retried.
	failedExports, failedImports float64
}

// cpuUse is the CPU time the broker's API server and etcd, the members'
// API servers and etcds, and the daemons used.
type cpuUse struct{ brokerAPI, brokerEtcd, memberAPI, memberEtcd, daemons time.Duration }

func cpuOf(cs *harness.ClusterSet, members []*fixture.Member, daemons []*fixture.Daemon) cpuUse {
	u := cpuUse{brokerAPI: cs.Broker.APIServerUsage().CPU, brokerEtcd: cs.Broker.EtcdUsage().CPU}
	for _, m := range members {
		u.memberAPI += m.APIServerUsage().CPU
		u.memberEtcd += m.EtcdUsage().CPU
	}
	for _, d := range daemons {
		u.daemons += d.Usage().CPU
	}
	return u
}

func (u cpuUse) minus(v cpuUse) cpuUse {
	return cpuUse{u.brokerAPI - v.brokerAPI, u.brokerEtcd - v.brokerEtcd, u.memberAPI - v.memberAPI, u.memberEtcd - v.memberEtcd, u.daemons - v.daemons}
}

func (u cpuUse) String() string {
	return fmt.Sprintf("%.1f / %.1f / %.1f / %.1f / %.1f", u.brokerAPI.Seconds(), u.brokerEtcd.Seconds(), u.memberAPI.Seconds(), u.memberEtcd.Seconds(), u.daemons.Seconds())
}

// admission is the broker API server's admission time of creates so far:
// in ResourceQuota (which serialises a namespace's creates on its quota's
// status) and in ValidatingAdmissionPolicy (the broker's policies), in
// seconds, and the number of creates.
type admission struct{ quota, policies, creates float64 }

func admissionOf(ctx context.Context, broker clientsOf) admission {
	raw, err := broker.kube.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return admission{}
	}
	s, err := parseSample(bytes.NewReader(raw))
	if err != nil {
		return admission{}
	}
	const m = "apiserver_admission_controller_admission_duration_seconds"
	create := func(plugin string) map[string]string { return map[string]string{"name": plugin, "operation": "CREATE"} }
	return admission{
		quota:    s.sum(m+"_sum", create("ResourceQuota")),
		policies: s.sum(m+"_sum", create("ValidatingAdmissionPolicy")),
		creates:  s.sum(m+"_count", create("ResourceQuota")),
	}
}

func (a admission) since(b admission) admission {
	return admission{a.quota - b.quota, a.policies - b.policies, a.creates - b.creates}
}

func (a admission) String() string {
	if a.creates == 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f creates: %.1f / %.1f ms", a.creates, 1000*a.quota/a.creates, 1000*a.policies/a.creates)
}

// bulkMCSD runs one round through mcsd: n Services with one endpoint each
// in the first member's namespace bulk-<round>, then their ServiceExports
// all at once.
func bulkMCSD(ctx context.Context, brokerAdmin clientsOf, members []*fixture.Member, daemons []*fixture.Daemon, n, round int) (bulkResult, error) {
	ns := fmt.Sprintf("bulk-%d", round+1)
	exporter := members[0]
	names := bulkNames("svc", n)
	for _, m := range members {
		if _, err := m.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			return bulkResult{}, err
		}
	}
	err := fixture.InParallel(ctx, 16, n, func(ctx context.Context, i int) error {
		svc := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: names[i]},
			Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}}},
		}
		if _, err := exporter.Kube.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
			return err
		}
		slice := &discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: names[i] + "-bench", Labels: map[string]string{
				discoveryv1.LabelServiceName: names[i], discoveryv1.LabelManagedBy: "bench.mcsd.io",
			}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To[int32](8080)}},
			Endpoints: []discoveryv1.Endpoint{{
				Addresses:  []string{nthAddr(exporter.PodCIDR, round*n+i+1).String()},
				Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true), Serving: ptr.To(true), Terminating: ptr.To(false)},
			}},
		}
		_, err := exporter.Kube.DiscoveryV1().EndpointSlices(ns).Create(ctx, slice, metav1.CreateOptions{})
		return err
	})
	if err != nil {
		return bulkResult{}, fmt.Errorf("creating the services: %w", err)
	}
	watchCtx, stop := context.WithCancel(ctx)
	defer stop()
	tr, clusters, err := track(watchCtx, brokerAdmin, members, ns, names)
	if err != nil {
		return bulkResult{}, err
	}
	for i, m := range members {
		go askDNS(watchCtx, tr, m.ID, daemons[i], ns)
	}
	failed := func() (float64, float64) {
		var exp, imp float64
		for _, d := range daemons {
			if s, err := (&scraper{url: d.Metrics}).scrape(ctx); err == nil {
				exp += s.sum("mcsd_exporter_syncs_total", map[string]string{"result": "error"})
				imp += s.sum("mcsd_importer_syncs_total", map[string]string{"result": "error"})
			}
		}
		return exp, imp
	}
	expBefore, impBefore := failed()
	created := make([]time.Time, n)
	began := time.Now()
	err = fixture.InParallel(ctx, n, n, func(ctx context.Context, i int) error {
		se := &mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: names[i]}}
		if _, err := exporter.MCS.MulticlusterV1beta1().ServiceExports(ns).Create(ctx, se, metav1.CreateOptions{}); err != nil {
			return err
		}
		created[i] = time.Now()
		return nil
	})
	if err != nil {
		return bulkResult{}, fmt.Errorf("creating the ServiceExports: %w", err)
	}
	err = wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 5*time.Minute, true, func(context.Context) (bool, error) {
		return tr.reached(clusters, stageStatus) && tr.reached(clusters, stageSlice) && tr.reached(clusters, stageDNS), nil
	})
	if err != nil {
		return bulkResult{}, fmt.Errorf("not every service was imported and answered everywhere: %s", tr.missing(clusters, stageImport, stageStatus, stageSlice, stageDNS))
	}
	res := tr.result(names, created, began, clusters)
	exp, imp := failed()
	res.failedExports, res.failedImports = exp-expBefore, imp-impBefore
	return res, nil
}

// result computes a round's figures from what tr saw.
func (tr *tracker) result(names []string, created []time.Time, began time.Time, clusters []string) bulkResult {
	var res bulkResult
	var lastImported, lastDNS time.Time
	for i, name := range names {
		for st := range stages {
			where := clusters
			if st == stageRecord || st == stageBrokerSlice {
				where = []string{"broker"}
			}
			if at := tr.latest(where, name, st); !at.IsZero() {
				res.perStage[st] = append(res.perStage[st], at.Sub(created[i]))
			}
		}
		imported := later(tr.latest(clusters, name, stageStatus), tr.latest(clusters, name, stageSlice))
		res.imported = append(res.imported, imported.Sub(created[i]))
		lastImported = later(lastImported, imported)
		lastDNS = later(lastDNS, tr.latest(clusters, name, stageDNS))
	}
	res.total = lastImported.Sub(began)
	if !lastDNS.IsZero() {
		res.dnsTotal = lastDNS.Sub(began)
	}
	return res
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// askDNS asks the node of cluster for the services not answered yet,
// every 50 ms, until ctx ends.
func askDNS(ctx context.Context, tr *tracker, cluster string, d *fixture.Daemon, ns string) {
	c := &dns.Client{Net: "udp", Timeout: time.Second}
	_ = wait.PollUntilContextCancel(ctx, 50*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		pending := tr.pending(cluster, stageDNS)
		if len(pending) == 0 {
			return true, nil
		}
		_ = nsenter.Do(netns.Path(d.Node.NS.Name), func() error {
			for _, name := range pending {
				m := new(dns.Msg)
				m.SetQuestion(name+"."+ns+".svc.clusterset.local.", dns.TypeA)
				resp, _, err := c.ExchangeContext(ctx, m, d.DNS.String())
				if err == nil && resp.Rcode == dns.RcodeSuccess && len(resp.Answer) > 0 {
					tr.note(cluster, name, stageDNS, time.Now())
				}
			}
			return nil
		})
		return false, nil
	})
}

func bulkNames(prefix string, n int) []string {
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("%s-%04d", prefix, i)
	}
	return names
}

// nthAddr is the k-th address of p.
func nthAddr(p netip.Prefix, k int) netip.Addr {
	a := p.Addr().As4()
	v := uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3])
	v += uint32(k)
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

// printBulk prints each round and the medians, with the spread, of both
// sides and of their ratio.
func printBulk(w io.Writer, n, workers int, plain, mcsd []bulkResult, loadBefore, loadAfter string) {
	fmt.Fprintf(w, "\nBulk export: %d ServiceExports created at once in one of 3 clusters, imported in all 3 (load average %s -> %s)\n", n, loadBefore, loadAfter)
	if workers != 4 {
		fmt.Fprintf(w, "NOT the defaults: the daemons ran with --exporter-workers=%d --importer-workers=%d, the plain writer as many at once\n", workers, workers)
	}
	fmt.Fprintf(w, "\n| round | plain writer: total | mcsd: imported everywhere, total | ratio | mcsd: DNS answers everywhere | mcsd per service p50 / p99 | mcsd failed syncs: exporter, importers |\n|---|---:|---:|---:|---:|---|---|\n")
	var ratios, plainTotals, mcsdTotals []time.Duration
	for r := range plain {
		ratio := float64(mcsd[r].total) / float64(plain[r].total)
		ratios = append(ratios, time.Duration(ratio*1000))
		plainTotals = append(plainTotals, plain[r].total)
		mcsdTotals = append(mcsdTotals, mcsd[r].total)
		fmt.Fprintf(w, "| %d | %s | %s | %.2fx | %s | %s / %s | %.0f, %.0f |\n", r+1, secs(plain[r].total), secs(mcsd[r].total), ratio,
			secs(mcsd[r].dnsTotal), secs(percentile(mcsd[r].imported, 50)), secs(percentile(mcsd[r].imported, 99)), mcsd[r].failedExports, mcsd[r].failedImports)
	}
	fmt.Fprintf(w, "| median (spread) | %s (%s) | %s (%s) | %.2fx (%.2f) | | | |\n",
		secs(percentile(plainTotals, 50)), secs(spread(plainTotals)), secs(percentile(mcsdTotals, 50)), secs(spread(mcsdTotals)),
		float64(percentile(ratios, 50))/1000, float64(spread(ratios))/1000)
	fmt.Fprintf(w, "\nPer stage, from each ServiceExport's creation (the slowest cluster's), p50 / p99 / max:\n\n| round | side |")
	for st := range stages {
		fmt.Fprintf(w, " %s |", stageNames[st])
	}
	fmt.Fprintf(w, " CPU-s broker apiserver / etcd / member apiservers / etcds / daemons | broker admission per create: ResourceQuota / policies |")
	fmt.Fprintf(w, "\n|---|---|%s---|---|\n", repeat("---|", int(stages)))
	for r := range plain {
		for _, side := range []struct {
			name string
			res  bulkResult
		}{{"plain", plain[r]}, {"mcsd", mcsd[r]}} {
			fmt.Fprintf(w, "| %d | %s |", r+1, side.name)
			for st := range stages {
				d := side.res.perStage[st]
				if len(d) == 0 {
					fmt.Fprintf(w, " - |")
					continue
				}
				fmt.Fprintf(w, " %s / %s / %s |", secs(percentile(d, 50)), secs(percentile(d, 99)), secs(percentile(d, 100)))
			}
			fmt.Fprintf(w, " %s | %s |\n", side.res.cpu, side.res.admission)
		}
	}
}

func secs(d time.Duration) string { return fmt.Sprintf("%.2f s", d.Seconds()) }

func repeat(s string, n int) string {
	out := ""
	for range n {
		out += s
	}
	return out
}

// percentile is the p-th percentile of ds (nearest rank).
func percentile(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := (p*len(s) + 99) / 100
	return s[max(i-1, 0)]
}

func spread(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	return slices.Max(ds) - slices.Min(ds)
}

// bulkPlain makes the writes of one bulk export without mcsd, in the
// namespace kube-public, which importers never import (so the daemons
// read these objects but write nothing for them): per service the
// exporter's record and slice on the broker with the exporting member's
// own identity (so the broker's admission weighs them), workers services
// at a time as the exporter's workers; then in every member the importer's
// ServiceImport, and its status and slice together, workers services at a
// time per member as the importer's workers. It leaves out the exporter's
// ServiceExport status write, which is not on the import's path.
func bulkPlain(ctx context.Context, brokerAdmin clientsOf, members []*fixture.Member, n, round, workers int) (bulkResult, error) {
	const ns = "kube-public"
	exporter := members[0]
	names := bulkNames(fmt.Sprintf("plain-%d", round+1), n)
	watchCtx, stop := context.WithCancel(ctx)
	defer stop()
	tr, clusters, err := track(watchCtx, brokerAdmin, members, ns, names)
	if err != nil {
		return bulkResult{}, err
	}
	w := plainWriter{exporter: exporter, members: members, round: round, n: n,
		broker:        daemonClients(exporter.BrokerConfig),
		local:         map[string]clientsOf{},
		exporterSlots: make(chan struct{}, workers), importerSlots: map[string]chan struct{}{}}
	for _, m := range members {
		w.local[m.ID] = daemonClients(m.Config)
		w.importerSlots[m.ID] = make(chan struct{}, workers)
	}
	created := make([]time.Time, n)
	began := time.Now()
	for i := range created {
		created[i] = began
	}
	err = fixture.InParallel(ctx, n, n, func(ctx context.Context, i int) error {
		return w.write(ctx, ns, names[i], i)
	})
	if err != nil {
		return bulkResult{}, err
	}
	err = wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return tr.reached(clusters, stageStatus) && tr.reached(clusters, stageSlice), nil
	})
	if err != nil {
		return bulkResult{}, fmt.Errorf("the plain writer's objects never all showed: %s", tr.missing(append([]string{"broker"}, clusters...), stageRecord, stageBrokerSlice, stageImport, stageStatus, stageSlice))
	}
	return tr.result(names, created, began, clusters), nil
}

// daemonClients are clients of cfg with mcsd's default client limits.
func daemonClients(cfg *rest.Config) clientsOf {
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = 500, 1000
	return clientsOf{kubernetes.NewForConfigOrDie(cfg), mcsclient.NewForConfigOrDie(cfg)}
}

type plainWriter struct {
	exporter      *fixture.Member
	members       []*fixture.Member
	round, n      int
	broker        clientsOf
	local         map[string]clientsOf
	exporterSlots chan struct{}
	importerSlots map[string]chan struct{}
}

// write makes one service's writes.
func (w plainWriter) write(ctx context.Context, ns, name string, i int) error {
	// VIPs from the top of the exporter's block, where mcsd's allocations
	// (from the bottom) do not reach.
	vip := nthAddr(w.exporter.Blocks[corev1.IPv4Protocol], 1<<16-2-(w.round*w.n+i)).String()
	endpoint := nthAddr(w.exporter.PodCIDR, 1<<15+w.round*w.n+i).String()
	ports := []mcsv1beta1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}}
	fake := fixture.FakeExporter{Cluster: w.exporter.ID, Kube: w.broker.kube, MCS: w.broker.mcs}
	w.exporterSlots <- struct{}{}
	// Writes in the member's namespace race on its ResourceQuota; the
	// API server then refuses one with a conflict, retried as mcsd does
	// (Export skips what exists).
	err := quotaretry.Write(ctx, func() error {
		return fake.Export(ctx, fixture.FakeService{Namespace: ns, Name: name, VIP: vip, Endpoints: []string{endpoint}})
	})
	<-w.exporterSlots
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
	errs := make([]error, len(w.members))
	for mi, m := range w.members {
		wg.Add(1)
		go func() {
			defer wg.Done()
			slots := w.importerSlots[m.ID]
			slots <- struct{}{}
			defer func() { <-slots }()
			errs[mi] = plainImport(ctx, w.local[m.ID], m.ID, ns, name, vip, map[string][]string{w.exporter.ID: {endpoint}}, ports)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
