// Command proxierbench measures the proxier with the real nft (or iptables)
// binaries in network namespaces it creates, side by side with kube-proxy in
// the same mode against a real API server holding Services of the same
// shape, and prints the figures. It judges nothing: the numbers are for
// people (and proxier/README.md). It needs root, nft, iptables and ip; the
// kube-proxy part needs the harness binaries and a kube-proxy binary (make
// bench-proxier builds both).
//
// Each size is measured PROXIER_BENCH_RUNS times on each side, alternating
// which side goes first, and the summary gives the median and the spread
// (lowest to highest) of every figure, with the 1-minute load average at the
// start of each run: on a shared machine the load says how far to trust a
// figure.
//
// Environment:
//
//	PROXIER_BENCH_MODES             proxier modes, each against kube-proxy in the same mode
//	                                (default nftables,iptables; none: only the dead cluster)
//	PROXIER_BENCH_SIZES             ServiceImports per run (default 1000,10000,30000)
//	PROXIER_BENCH_KUBE_PROXY_SIZES  sizes kube-proxy runs at (default: PROXIER_BENCH_SIZES); the
//	                                others are skipped, and the output says so
//	PROXIER_BENCH_RUNS              runs per size and side (default 3)
//	PROXIER_BENCH_KUBE_PROXY        kube-proxy binary; unset or missing skips kube-proxy
//	PROXIER_BENCH_LATENCY_SAMPLES   connects per latency figure (default 500)
//	PROXIER_BENCH_DEAD_CLUSTER      clusters x services x endpoints of the dead-cluster scenario
//	                                (default 3x10000x1,50x1000x10; none skips it)
//	PROXIER_BENCH_PROFILE           if set, CPU profiles of the first syncs and of the dead cluster's
//	                                departures are written to <value>.<what>.<time>
package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/klog/v2"

	"github.com/mcsd-io/mcsd/proxier"
)

// Every service of every run has the same shape: two TCP ports, ten ready
// endpoints.
const (
	endpointsPerService = 10
	// partialSyncs is how many one-service changes are timed per size.
	partialSyncs = 3
)

// benchPorts are the service ports and the endpoints' target ports.
var benchPorts = []struct {
	name         string
	port, target int32
}{{"http", 80, 8080}, {"https", 443, 8443}}

func main() {
	klog.InitFlags(nil)
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "proxierbench: run as root (it creates network namespaces and nftables tables)")
		os.Exit(1)
	}
	if err := run(); err != nil {
		fatal(err)
	}
}

// run measures and prints; it returns only after removing the namespaces
// and the API server it started, whatever happened.
func run() error {
	sizes, err := sizesFromEnv("PROXIER_BENCH_SIZES", "1000,10000,30000")
	if err != nil {
		return err
	}
	kpSizes, err := sizesFromEnv("PROXIER_BENCH_KUBE_PROXY_SIZES", joinSizes(sizes))
	if err != nil {
		return err
	}
	samples, err := numberFromEnv("PROXIER_BENCH_LATENCY_SAMPLES", 500, 10)
	if err != nil {
		return err
	}
	runs, err := numberFromEnv("PROXIER_BENCH_RUNS", 3, 1)
	if err != nil {
		return err
	}
	dead, err := parseDeadShapes("PROXIER_BENCH_DEAD_CLUSTER", "3x10000x1,50x1000x10")
	if err != nil {
		return err
	}
	var modes []proxier.Mode
	for _, m := range strings.Split(envOr("PROXIER_BENCH_MODES", "nftables,iptables"), ",") {
		if m == "none" {
			break
		}
		mode, err := proxier.ParseMode(strings.TrimSpace(m))
		if err != nil || mode == proxier.ModeAuto {
			return fmt.Errorf("PROXIER_BENCH_MODES: %q is not nftables or iptables", m)
		}
		modes = append(modes, mode)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	fmt.Printf("proxierbench: modes %v, sizes %v, %d runs per size and side, %d TCP ports x %d endpoints per service; %s; %s; %d CPUs\n",
		modes, sizes, runs, len(benchPorts), endpointsPerService, version("nft"), version("iptables"), runtime.NumCPU())

	topo, err := newTopology()
	if err != nil {
		return err
	}
	defer topo.close()

	var kp *kubeProxyBench
	switch bin := os.Getenv("PROXIER_BENCH_KUBE_PROXY"); {
	case bin == "":
		fmt.Println("kube-proxy: skipped (PROXIER_BENCH_KUBE_PROXY is not set; make bench-proxier sets it)")
	default:
		if _, err := os.Stat(bin); err != nil {
			fmt.Printf("kube-proxy: skipped (%v)\n", err)
		} else if kp, err = newKubeProxyBench(ctx, bin); err != nil {
			fmt.Printf("kube-proxy: not run: %v\n", err)
			kp = nil
		} else {
			defer kp.close()
		}
	}

	direct, err := topo.connectLatency(ctx, fmt.Sprintf("%s:%d", backendAddr, backendPort), samples)
	if err != nil {
		return err
	}
	fmt.Printf("first-packet TCP connect, direct to the backend:          %s  [load %s]\n", direct, loadAverage())
	for _, mode := range modes {
		if err := benchMode(ctx, topo, kp, mode, sizes, kpSizes, runs, samples); err != nil {
			return err
		}
	}
	return benchDeadCluster(ctx, topo, dead, runs)
}

// benchMode measures the proxier in one mode, and kube-proxy in the same
// mode, at every size.
func benchMode(ctx context.Context, topo *topology, kp *kubeProxyBench, mode proxier.Mode, sizes, kpSizes []int, runs, samples int) error {
	fmt.Printf("\n== %s mode ==\n", mode)
	alone, err := mcsdOnce(ctx, topo, mode, 0, true, samples, "")
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "proxierbench")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	limits, limitCPU, mcsdCPU := map[int][]time.Duration{}, map[int][]time.Duration{}, map[int][]time.Duration{}
	limitTool := "nft -f"
	if mode == proxier.ModeIPTables {
		limitTool = "iptables-restore"
	}
	fmt.Printf("first-packet TCP connect, ClusterSetIP, 1 import:         %s  [load %s]\n", alone.lat, alone.times.load)

	mcsd, kpRes := map[int][]syncTimes{}, map[int][]syncTimes{}
	var largest latency
	for _, n := range sizes {
		withKP := kp != nil && slices.Contains(kpSizes, n)
		if kp != nil && !withKP {
			fmt.Printf("kube-proxy: not run at %d services (PROXIER_BENCH_KUBE_PROXY_SIZES=%s)\n", n, joinSizes(kpSizes))
		}
		if withKP {
			if err := kp.grow(ctx, n); err != nil {
				fmt.Printf("kube-proxy: stopped: %v\n", err)
				kp, withKP = nil, false
			}
		}
		var input *limitInput
		for run := 0; run < runs; run++ {
			sides := []string{"mcsd", "kube-proxy"}
			if run%2 == 1 {
				sides = []string{"kube-proxy", "mcsd"}
			}
			for _, side := range sides {
				switch {
				case side == "mcsd":
					// The limit goes first on odd runs, with the input
					// an earlier run saved (the same at every run).
					var limit time.Duration
					if run%2 == 1 && input != nil {
						if limit, err = input.load(ctx, topo); err != nil {
							return fmt.Errorf("%s of the proxier's first sync, %d imports: %w", limitTool, n, err)
						}
					}
					sub := filepath.Join(dir, strconv.Itoa(n))
					if err := os.MkdirAll(sub, 0o700); err != nil {
						return err
					}
					r, err := mcsdOnce(ctx, topo, mode, n, run == 0 && n == sizes[len(sizes)-1], samples, sub)
					if err != nil {
						return fmt.Errorf("proxier, %d imports: %w", n, err)
					}
					if input == nil {
						input = r.input
					}
					if run%2 == 0 || limit == 0 {
						if limit, err = input.load(ctx, topo); err != nil {
							return fmt.Errorf("%s of the proxier's first sync, %d imports: %w", limitTool, n, err)
						}
					}
					limits[n] = append(limits[n], limit)
					limitCPU[n] = append(limitCPU[n], input.cpu)
					mcsdCPU[n] = append(mcsdCPU[n], r.times.fullCPU)
					fmt.Printf("limit      %6d run %d: %s of the same input (%d bytes) %s, CPU %s; mcsd's full sync is %.2fx, CPU %s (%.2fx)\n",
						n, run+1, limitTool, input.nbytes, ms(limit), ms(input.cpu), float64(r.times.full)/float64(limit),
						ms(r.times.fullCPU), float64(r.times.fullCPU)/float64(input.cpu))
					mcsd[n] = append(mcsd[n], r.times)
					if r.lat.p50 > 0 {
						largest = r.lat
					}
					fmt.Printf("mcsd       %6d run %d: full %s, partial %s (median of %d), resync %s, change during resync applied after %s, table check %s; after the first sync: heap %d MiB, RSS %d MiB  [load %s]\n",
						n, run+1, ms(r.times.full), ms(r.times.partial), partialSyncs, ms(r.times.resync), ms(r.times.delay), ms(r.times.check),
						r.times.heap>>20, r.times.rss>>20, r.times.load)
				case withKP:
					r, err := kp.measure(ctx, string(mode), n)
					if err != nil {
						fmt.Printf("kube-proxy: stopped: %v\n", err)
						withKP = false
						continue
					}
					kpRes[n] = append(kpRes[n], r)
					fmt.Printf("kube-proxy %6d run %d: full %s, partial %s (median of %d)  [load %s]\n",
						n, run+1, ms(r.full), ms(r.partial), partialSyncs, r.load)
				}
			}
		}
	}
	if largest.p50 > 0 {
		fmt.Printf("first-packet TCP connect, ClusterSetIP, %d imports:  %s (1 import: %s)\n", sizes[len(sizes)-1]+1, largest, alone.lat)
	}
	printSummary(mode, sizes, mcsd, kpRes)
	printLimits(mode, limitTool, sizes, mcsd, limits)
	fmt.Printf("CPU time of the same (the process's and its children's: less sensitive to the machine's load than the wall clock)\n")
	for _, n := range sizes {
		ratio := "-"
		if m := median(limitCPU[n]); m > 0 {
			ratio = fmt.Sprintf("%.2f", float64(median(mcsdCPU[n]))/float64(m))
		}
		fmt.Printf("%8d  %-28s %-28s %s\n", n, spread(mcsdCPU[n]), spread(limitCPU[n]), ratio)
	}
	return nil
}

// printLimits sets each size's full syncs beside the tool's load of the
// same input.
func printLimits(mode proxier.Mode, tool string, sizes []int, mcsd map[int][]syncTimes, limits map[int][]time.Duration) {
	fmt.Printf("\n%s mode: mcsd's full sync against %s of the same input (the kernel's and the tool's cost alone), median [lowest - highest]\n", mode, tool)
	fmt.Printf("%8s  %-28s %-28s %s\n", "services", "mcsd full", tool, "full/limit (median, and per run)")
	for _, n := range sizes {
		var full []time.Duration
		var per []string
		for i, t := range mcsd[n] {
			full = append(full, t.full)
			if i < len(limits[n]) {
				per = append(per, fmt.Sprintf("%.2f", float64(t.full)/float64(limits[n][i])))
			}
		}
		ratio := "-"
		if m := median(limits[n]); m > 0 {
			ratio = fmt.Sprintf("%.2f", float64(median(full))/float64(m))
		}
		fmt.Printf("%8d  %-28s %-28s %s (%s)\n", n, spread(full), spread(limits[n]), ratio, strings.Join(per, " "))
	}
}

// mcsdResult is one proxier run.
type mcsdResult struct {
	times syncTimes
	lat   latency
	// input is the first sync's, saved under the directory given.
	input *limitInput
}

func mcsdOnce(ctx context.Context, topo *topology, mode proxier.Mode, n int, withLatency bool, samples int, dir string) (mcsdResult, error) {
	run, err := newProxierRun(topo, mode)
	if err != nil {
		return mcsdResult{}, err
	}
	defer run.close()
	times, lat, err := run.measure(ctx, n, withLatency, samples)
	if err != nil || dir == "" {
		return mcsdResult{times: times, lat: lat}, err
	}
	input, err := saveLimitInput(run, dir)
	return mcsdResult{times, lat, input}, err
}

// syncTimes are one run's figures: the first full sync, the median of the
// partial syncs after a change to one service, and (the proxier only) the
// periodic resync, how long a change made as a resync starts waits, and the
// periodic table check; load is the load average at the start.
type syncTimes struct {
	full, partial, resync, delay, check time.Duration
	load                                string
	// heap and rss are the bench process's live heap and resident set
	// after the first sync (the proxier's, plus the bench's own copy of
	// the imports and slices it handed over).
	heap, rss uint64
	// fullCPU is the CPU time the first sync took: the bench process's
	// (the proxier's) and its children's (nft, iptables-restore).
	fullCPU time.Duration
}

// cpuUsed is the CPU time this process and its waited-for children have
// used. On a shared machine it tells apart what a sync costs from how
// long it waited for a core.
func cpuUsed() time.Duration {
	var total time.Duration
	for _, who := range []int{syscall.RUSAGE_SELF, syscall.RUSAGE_CHILDREN} {
		var ru syscall.Rusage
		if syscall.Getrusage(who, &ru) == nil {
			total += time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
		}
	}
	return total
}

// memory is the live heap after a collection, and the resident set.
func memory() (heap, rss uint64) {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	if b, err := os.ReadFile("/proc/self/status"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
				kb, _ := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
				rss = kb << 10
			}
		}
	}
	return ms.HeapAlloc, rss
}

// loadAverage is the 1-minute load average.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	return strings.Fields(string(b))[0]
}

func printSummary(mode proxier.Mode, sizes []int, mcsd, kp map[int][]syncTimes) {
	fmt.Println()
	fmt.Printf("%s mode: sync times, median [lowest - highest] of the runs, as each reports in sync_{full,partial}_proxy_rules_duration_seconds\n", mode)
	fmt.Printf("%8s  %-28s %-28s %-26s %-26s %7s %7s  %s\n", "services", "mcsd full", "kube-proxy full", "mcsd partial", "kube-proxy partial", "full/kp", "part/kp", "load")
	for _, n := range sizes {
		m, k := mcsd[n], kp[n]
		get := func(ts []syncTimes, f func(syncTimes) time.Duration) []time.Duration {
			var ds []time.Duration
			for _, t := range ts {
				ds = append(ds, f(t))
			}
			return ds
		}
		full := func(t syncTimes) time.Duration { return t.full }
		partial := func(t syncTimes) time.Duration { return t.partial }
		ratio := func(a, b []time.Duration) string {
			if len(a) == 0 || len(b) == 0 || median(b) <= 0 {
				return "-"
			}
			return fmt.Sprintf("%.3f", float64(median(a))/float64(median(b)))
		}
		var loads []string
		for _, t := range append(append([]syncTimes(nil), m...), k...) {
			loads = append(loads, t.load)
		}
		fmt.Printf("%8d  %-28s %-28s %-26s %-26s %7s %7s  %s\n", n,
			spread(get(m, full)), spread(get(k, full)), spread(get(m, partial)), spread(get(k, partial)),
			ratio(get(m, full), get(k, full)), ratio(get(m, partial), get(k, partial)), strings.Join(loads, " "))
	}
	fmt.Println("(full/kp, part/kp: mcsd's median over kube-proxy's; load: 1-minute load average at the start of each run)")
	fmt.Println()
	fmt.Println("mcsd's periodic work: resync (every full sync period), a change made as a resync starts (time until it is carried), table check (every sync period: a netlink count of one chain in nftables mode, iptables -C of the PREROUTING jump in iptables mode)")
	for _, n := range sizes {
		m := mcsd[n]
		if len(m) == 0 {
			continue
		}
		var resync, delay, check []time.Duration
		for _, t := range m {
			resync, delay, check = append(resync, t.resync), append(delay, t.delay), append(check, t.check)
		}
		fmt.Printf("%8d  resync %s  change during resync %s  table check %s\n", n, spread(resync), spread(delay), spread(check))
	}
}

// spread is "median [lowest - highest]", or "-" without figures.
func spread(ds []time.Duration) string {
	if len(ds) == 0 {
		return "-"
	}
	return fmt.Sprintf("%s [%s - %s]", msShort(median(ds)), msShort(slices.Min(ds)), msShort(slices.Max(ds)))
}

func msShort(d time.Duration) string {
	return fmt.Sprintf("%.1f", float64(d)/float64(time.Millisecond))
}

func numberFromEnv(key string, def, least int) (int, error) {
	v := os.Getenv(key)
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < least {
		return 0, fmt.Errorf("%s=%q: want a number >= %d", key, v, least)
	}
	return n, nil
}

func show(d time.Duration, ok bool) string {
	if !ok {
		return "-"
	}
	return ms(d)
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond)) }

func sizesFromEnv(key, def string) ([]int, error) {
	v := os.Getenv(key)
	if v == "" {
		v = def
	}
	var sizes []int
	for _, f := range strings.Split(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%s=%q: want comma-separated positive numbers", key, v)
		}
		sizes = append(sizes, n)
	}
	sort.Ints(sizes)
	return sizes, nil
}

func joinSizes(sizes []int) string {
	s := make([]string, len(sizes))
	for i, n := range sizes {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ",")
}

// version is what cmd --version prints.
func version(cmd string) string {
	out, err := exec.Command(cmd, "--version").Output()
	if err != nil {
		return cmd + " (unknown version)"
	}
	return strings.TrimSpace(string(out))
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "proxierbench:", err)
	os.Exit(1)
}
