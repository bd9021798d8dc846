package realnode

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// pollEvery is how often a client asks DNS for a name that does not
// resolve yet.
const pollEvery = 50 * time.Millisecond

// hogPerCore is how many busy loops per core the CPU hog runs beside the
// test: the load the test passes under, stated rather than left to
// whatever else the machine runs.
const hogPerCore = 1

// Resolvable means reachable on every node, under load. 40 services of
// cluster2 are exported at once while a CPU hog keeps every core busy; on
// each node of cluster1 a client pod asks for each name every 50 ms and
// connects the moment it resolves, without a retry, two ways: through the
// cluster DNS as the pod's resolv.conf says (CoreDNS, the snippet, the
// mcsd-dns Service: whichever node's mcsd answers), and asking the other
// node's mcsd directly, so that every answer comes from a node that is not
// the client's. Every query must be answered at its first try (within
// 2 s) and every connection too.
func testResolvableMeansReachableOnEveryNode(t *testing.T) {
	w := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	const ns, app, count = "reach", "reach", 40
	exporting, importing := w.members[1], w.members[0]
	w.namespace(t, ns)
	w.backends(ctx, t, exporting, ns, app)
	var names []string
	for i := range count {
		names = append(names, app+"-"+strconv.Itoa(i))
	}
	w.services(ctx, t, exporting, ns, app, names)

	type probe struct {
		r       resolver
		service string
	}
	var probes []probe
	nodes := importing.RealNodes()
	for i, c := range importing.clients {
		other := nodes[(i+1)%len(nodes)]
		for _, name := range names {
			probes = append(probes, probe{viaClusterDNS(c), name}, probe{viaMCSD(c, other.IP), name})
		}
	}
	type result struct {
		via                string
		reached            time.Duration
		queries            []time.Duration
		lookupErr, dialErr error
	}
	results := make([]result, len(probes))
	hog := w.startHog(ctx, t)
	exported := w.export(ctx, t, exporting, ns, names...)
	var wg sync.WaitGroup
	for i, p := range probes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res := &results[i]
			res.via = p.r.via
			began := exported[p.service]
			for ctx.Err() == nil {
				asked := time.Now()
				vip, ok, err := p.r.lookup(fqdn(ns, p.service))
				res.queries = append(res.queries, time.Since(asked))
				if err != nil {
					res.lookupErr = fmt.Errorf("%s asking %s for %s: %w", p.r.c, p.r.via, p.service, err)
					return
				}
				if !ok {
					time.Sleep(pollEvery)
					continue
				}
				cctx, ccancel := context.WithTimeout(ctx, 3*time.Second)
				_, err = p.r.c.Ask(cctx, "tcp", netip.AddrPortFrom(vip, echoPort).String())
				ccancel()
				if err != nil {
					res.dialErr = fmt.Errorf("%s: %s resolved by %s to %s %v after the export, and the connection made at once failed: %w; the node's rules of %s now: %s",
						p.r.c, p.service, p.r.via, vip, time.Since(began).Round(time.Millisecond), err, vip, vipRules(p.r.c, vip))
					return
				}
				res.reached = time.Since(began)
				return
			}
			res.lookupErr = fmt.Errorf("%s: %s never resolved through %s: %w", p.r.c, p.service, p.r.via, ctx.Err())
		}()
	}
	wg.Wait()
	loaded := hog.stop()

	type figures struct {
		lookupsFailed, dialsFailed int
		queries, reached           []time.Duration
	}
	byVia := map[string]*figures{}
	for _, res := range results {
		kind := "through the cluster DNS"
		if res.via != "the cluster DNS" {
			kind = "answered by the other node's mcsd"
		}
		f := byVia[kind]
		if f == nil {
			f = &figures{}
			byVia[kind] = f
		}
		f.queries = append(f.queries, res.queries...)
		switch {
		case res.lookupErr != nil:
			f.lookupsFailed++
			t.Error(res.lookupErr)
		case res.dialErr != nil:
			f.dialsFailed++
			t.Error(res.dialErr)
		default:
			f.reached = append(f.reached, res.reached)
		}
	}
	t.Logf("figure: %d services exported at once, %d first connections from both nodes of %s, under %s", count, len(probes), importing.Name, loaded)
	for _, kind := range slices.Sorted(maps.Keys(byVia)) {
		f := byVia[kind]
		t.Logf("figure: %s: %d queries, %d lookups failed, %d connections failed; a query's answer p50 %v, p99 %v, max %v; export -> reachable from a pod p50 %v, p99 %v, max %v (%d connections)", kind,
			len(f.queries), f.lookupsFailed, f.dialsFailed,
			percentile(f.queries, 50).Round(100*time.Microsecond), percentile(f.queries, 99).Round(time.Millisecond), percentile(f.queries, 100).Round(time.Millisecond),
			percentile(f.reached, 50).Round(time.Millisecond), percentile(f.reached, 99).Round(time.Millisecond), percentile(f.reached, 100).Round(time.Millisecond), len(f.reached))
	}
	if t.Failed() {
		logClusterDNS(t, importing)
	}
}

// vipRules are the lines of mcsd's nftables table on the client's node
// that name vip: what a connection to it meets (a DNAT to its endpoints, or
// the reject of a service without them).
func vipRules(c *client, vip netip.Addr) string {
	out, err := c.node.NS.Exec("nft", "list", "table", "ip", "mcsd")
	if err != nil {
		return err.Error()
	}
	var lines []string
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, vip.String()+" ") {
			lines = append(lines, strings.TrimSpace(line))
		}
	}
	if len(lines) == 0 {
		return "none"
	}
	return strings.Join(lines, " | ")
}

// logClusterDNS logs the end of every CoreDNS pod's log: what its errors
// plugin said of the queries it forwarded, and its health plugin of its
// own answers' delay.
func logClusterDNS(t *testing.T, m *member) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pods, err := m.Kube.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: "k8s-app=kube-dns"})
	if err != nil {
		t.Logf("%s: listing CoreDNS pods: %v", m.Name, err)
		return
	}
	for _, p := range pods.Items {
		logs, err := m.Kube.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{TailLines: ptrTo[int64](30)}).DoRaw(ctx)
		t.Logf("%s: the end of the log of CoreDNS pod %s on %s (%v):\n%s", m.Name, p.Name, p.Spec.NodeName, err, logs)
	}
}

// hog is the CPU hog (test/cmd/cpuhog) running beside a test, and the
// machine's load meanwhile.
type hog struct {
	cmd     *exec.Cmd
	workers int
	began   time.Time
	cpu     map[int]cpuTime
	done    chan struct{}
	sampler sync.WaitGroup

	mu sync.Mutex
	// The 1-minute load average at its highest, and the runnable tasks
	// (the 4th field of /proc/loadavg) on average and at most.
	loadMax                 float64
	samples, runnable, rMax int
	stopped                 bool
}

// startHog builds and starts the CPU hog, hogPerCore busy loops per core
// at the test's own priority, bounded by ctx's deadline and stopped at the
// latest when the test ends, and samples the machine's load until stop.
func (w *world) startHog(ctx context.Context, t *testing.T) *hog {
	t.Helper()
	bin := filepath.Join(w.binDir, "cpuhog")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./test/cmd/cpuhog")
	build.Dir = w.root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the CPU hog: %v\n%s", err, out)
	}
	bound := 10 * time.Minute
	if d, ok := ctx.Deadline(); ok {
		bound = time.Until(d)
	}
	h := &hog{workers: hogPerCore * runtime.NumCPU(), began: time.Now(), cpu: processCPU(), done: make(chan struct{})}
	h.cmd = exec.Command(bin, "-workers", strconv.Itoa(h.workers), "-for", bound.Round(time.Second).String())
	h.cmd.Stderr = os.Stderr
	if err := h.cmd.Start(); err != nil {
		t.Fatalf("starting the CPU hog: %v", err)
	}
	t.Cleanup(func() { h.stop() })
	h.sampler.Add(1)
	go func() {
		defer h.sampler.Done()
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			h.sample()
			select {
			case <-h.done:
				return
			case <-tick.C:
			}
		}
	}()
	return h
}

// sample reads /proc/loadavg once.
func (h *hog) sample() {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return
	}
	f := strings.Fields(string(data))
	if len(f) < 4 {
		return
	}
	avg, _ := strconv.ParseFloat(f[0], 64)
	running, _, _ := strings.Cut(f[3], "/")
	r, _ := strconv.Atoi(running)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.loadMax = max(h.loadMax, avg)
	h.samples++
	h.runnable += r
	h.rMax = max(h.rMax, r)
}

// stop stops the hog (the first call) and says what the load was: the
// hog, the load average and runnable tasks, and which programs used the
// most CPU meanwhile.
func (h *hog) stop() string {
	h.mu.Lock()
	stopped := h.stopped
	h.stopped = true
	h.mu.Unlock()
	if !stopped {
		close(h.done)
		h.sampler.Wait()
		_ = h.cmd.Process.Signal(syscall.SIGTERM)
		_ = h.cmd.Wait()
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	mean := 0.0
	if h.samples > 0 {
		mean = float64(h.runnable) / float64(h.samples)
	}
	return fmt.Sprintf("a CPU hog of %d busy loops on %d cores for %v: load average (1 min) up to %.1f, runnable tasks %.1f on average, %d at most; CPU used most by %s",
		h.workers, runtime.NumCPU(), time.Since(h.began).Round(100*time.Millisecond), h.loadMax, mean, h.rMax, topCPU(h.cpu, processCPU(), 8))
}

// cpuTime is a process's program name and CPU time (user and system, in
// clock ticks).
type cpuTime struct {
	comm  string
	ticks int64
}

// processCPU reads every process's CPU time so far.
func processCPU() map[int]cpuTime {
	out := map[int]cpuTime{}
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, f := range stats {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		// pid (comm) state ppid ... utime stime: comm may hold spaces.
		st := string(data)
		open, end := strings.IndexByte(st, '('), strings.LastIndexByte(st, ')')
		if open < 0 || end < open || end+2 > len(st) {
			continue
		}
		rest := strings.Fields(st[end+2:])
		if len(rest) < 13 {
			continue
		}
		pid, _ := strconv.Atoi(strings.TrimSpace(st[:open]))
		utime, _ := strconv.ParseInt(rest[11], 10, 64)
		stime, _ := strconv.ParseInt(rest[12], 10, 64)
		out[pid] = cpuTime{comm: st[open+1 : end], ticks: utime + stime}
	}
	return out
}

// topCPU names the n programs that used the most CPU between two readings
// of processCPU, with their seconds (processes that ended in between are
// not counted). Clock ticks are taken as the usual 100 a second.
func topCPU(before, after map[int]cpuTime, n int) string {
	by := map[string]int64{}
	for pid, a := range after {
		used := a.ticks
		if b, ok := before[pid]; ok && b.comm == a.comm {
			used -= b.ticks
		}
		by[a.comm] += used
	}
	comms := slices.SortedFunc(maps.Keys(by), func(x, y string) int { return int(by[y] - by[x]) })
	var out []string
	for _, c := range comms[:min(n, len(comms))] {
		out = append(out, fmt.Sprintf("%s %.1fs", c, float64(by[c])/100))
	}
	return strings.Join(out, ", ")
}
