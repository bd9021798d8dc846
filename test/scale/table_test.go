package scale

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/mcsd-io/mcsd/test/lib/harness"
)

// scenario is a clusterset's shape: clusters, each exporting services with
// endpoints ready endpoints each.
type scenario struct{ clusters, services, endpoints int }

func (sc scenario) String() string {
	return fmt.Sprintf("%dx%dx%d", sc.clusters, sc.services, sc.endpoints)
}

// parseScenarios reads "CxSxE,CxSxE".
func parseScenarios(spec string) ([]scenario, error) {
	var out []scenario
	for _, part := range strings.Split(spec, ",") {
		fields := strings.Split(strings.TrimSpace(part), "x")
		if len(fields) != 3 {
			return nil, fmt.Errorf("%q is not CLUSTERSxSERVICESxENDPOINTS", part)
		}
		var n [3]int
		for i, f := range fields {
			v, err := strconv.Atoi(f)
			if err != nil || v < 1 {
				return nil, fmt.Errorf("%q: %q is not a positive number", part, f)
			}
			n[i] = v
		}
		if n[0] < 2 || n[0] > maxClusters {
			return nil, fmt.Errorf("%q: between 2 and %d clusters (one of them dies)", part, maxClusters)
		}
		if n[1]*n[2] > 250*256 {
			return nil, fmt.Errorf("%q: at most %d endpoints per cluster", part, 250*256)
		}
		out = append(out, scenario{n[0], n[1], n[2]})
	}
	return out, nil
}

// result is what one scenario measured.
type result struct {
	scenario
	loadBefore, loadAfter string

	brokerWrite time.Duration
	converge    time.Duration
	plainWrite  time.Duration // the same writes by a plain client
	// plainAPIServerCPU is the member API server's CPU time meanwhile
	// (and while the plain writer's objects were deleted).
	plainAPIServerCPU time.Duration
	writesPerService  float64
	daemon            harness.Usage
	daemonSteady      harness.Usage // the importer at the end of the run
	dataPlane         harness.Usage
	brokerAPIServer   harness.Usage
	memberAPIServer   harness.Usage
	// cpu is the CPU time each process had from mcsd's start to the
	// import's convergence.
	cpu      map[string]time.Duration
	brokerDB int64

	// kubeProxy is kube-proxy on the same objects; nil when it was not
	// run.
	kubeProxy *kubeProxyResult

	flipWrites, flipConfigMapWrites float64
	dnsGone, nftGone                time.Duration
	partialSync                     time.Duration // the proxier's mean partial sync meanwhile
	cleanupRate                     float64
	cleanup                         time.Duration
}

func mib(b int64) string { return fmt.Sprintf("%.0f MiB", float64(b)/(1<<20)) }

// cpuParts are the processes whose CPU time the table shows.
var cpuParts = []string{"importer", "data plane", "member apiserver", "member etcd", "broker apiserver", "broker etcd"}

func printTable(w io.Writer, rows []result) {
	fmt.Fprintln(w)
	fmt.Fprintln(w, "mcsd with its default settings (TTL 10 s, 500 QPS per client, 4 importer workers) as two processes,")
	fmt.Fprintln(w, "--components=importer and --components=dns,proxier; one member cluster; simulated clusters writing to a real broker")
	if args := os.Getenv("MCSD_SCALE_ARGS"); args != "" {
		fmt.Fprintln(w, "NOT the defaults only: both processes also ran with", args)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "clusters x services x endpoints\tbroker objects\timport converged\tplain writer (CPU s: member apiserver)\tratio\tservices/s\tlocal writes/service\t")
	for _, p := range cpuParts {
		fmt.Fprintf(tw, "CPU s: %s\t", p)
	}
	fmt.Fprintln(tw, "load before -> after\t")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%d\t%.1f s\t%.1f s (%.0f)\t%.2fx\t%.0f\t%.2f\t", r.scenario, 2*r.clusters*r.services, r.converge.Seconds(), r.plainWrite.Seconds(), r.plainAPIServerCPU.Seconds(),
			r.converge.Seconds()/r.plainWrite.Seconds(), float64(r.services)/r.converge.Seconds(), r.writesPerService)
		for _, p := range cpuParts {
			fmt.Fprintf(tw, "%.0f\t", r.cpu[p].Seconds())
		}
		fmt.Fprintf(tw, "%s -> %s\t\n", r.loadBefore, r.loadAfter)
	}
	tw.Flush()
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "clusters x services x endpoints\timporter RSS: converged, end (peak)\tdata plane RSS (peak)\tbroker apiserver RSS\tbroker etcd db\tmember apiserver RSS\tbroker flip: writes (ConfigMap)\tdead cluster gone: DNS\tnft (mean partial sync)\tits slices cleaned up (per s)\t")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s, %s (%s)\t%s (%s)\t%s\t%s\t%s\t%.0f (%.0f)\t%.2f s\t%.2f s (%.2f s)\t%.0f s (%.0f)\t\n",
			r.scenario, mib(r.daemon.RSS), mib(r.daemonSteady.RSS), mib(r.daemonSteady.PeakRSS), mib(r.dataPlane.RSS), mib(r.dataPlane.PeakRSS),
			mib(r.brokerAPIServer.RSS), mib(r.brokerDB), mib(r.memberAPIServer.RSS),
			r.flipWrites, r.flipConfigMapWrites, r.dnsGone.Seconds(), r.nftGone.Seconds(), r.partialSync.Seconds(), r.cleanup.Seconds(), r.cleanupRate)
	}
	tw.Flush()
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "clusters x services x endpoints\tdata plane RSS (peak)\tkube-proxy RSS (peak)\tdata plane / kube-proxy: RSS (peak)\tkube-proxy synced after\t")
	for _, r := range rows {
		if r.kubeProxy == nil {
			fmt.Fprintf(tw, "%s\t%s (%s)\tnot run\t\t\t\n", r.scenario, mib(r.dataPlane.RSS), mib(r.dataPlane.PeakRSS))
			continue
		}
		kp := r.kubeProxy.usage
		fmt.Fprintf(tw, "%s\t%s (%s)\t%s (%s)\t%.2fx (%.2fx)\t%.1f s\t\n", r.scenario, mib(r.dataPlane.RSS), mib(r.dataPlane.PeakRSS), mib(kp.RSS), mib(kp.PeakRSS),
			float64(r.dataPlane.RSS)/float64(kp.RSS), float64(r.dataPlane.PeakRSS)/float64(kp.PeakRSS), r.kubeProxy.synced.Seconds())
	}
	tw.Flush()
	fmt.Fprintln(w, "import converged: mcsd start -> every ServiceImport with every cluster in its status and every EndpointSlice written.")
	fmt.Fprintln(w, "plain writer: the same ServiceImports, statuses and EndpointSlices written to the same API server by a plain client, 4 services at a time")
	fmt.Fprintln(w, "  (the importer's workers) with mcsd's client limits, before mcsd starts; ratio: import converged / plain writer.")
	fmt.Fprintln(w, "CPU s: CPU time of each process from mcsd's start to convergence (the machine's cores are shared by all of them).")
	fmt.Fprintln(w, "broker flip: the importer's writes of ServiceImports and slices while the broker went down and came back (liveness ConfigMap writes apart).")
	fmt.Fprintln(w, "kube-proxy: v1.36.3 in nftables mode in a node of its own, on the same services and endpoints as Services (ClusterIP; headless where")
	fmt.Fprintln(w, "  mcsd's are) and one EndpointSlice per cluster, before mcsd starts; its RSS (VmRSS, peak VmHWM) once its service map held every")
	fmt.Fprintln(w, "  ClusterIP service. The data plane's RSS is read once it serves every service (DNS and nftables).")
	fmt.Fprintln(w, "dead cluster gone: time from its last Lease renewal until its endpoints left DNS and the node's nftables (TTL + 2 s = 12 s is the bound).")
}
