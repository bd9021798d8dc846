// Command proxierbench measures the proxier with the real nft binary in
// network namespaces it creates, side by side with kube-proxy in nftables
// mode against a real API server holding Services of the same shape, and
// prints the figures. It judges nothing: the numbers are for people (and
// proxier/README.md). It needs root, nft and ip; the kube-proxy part needs
// the harness binaries and a kube-proxy binary (make bench-proxier builds
// both).
//
// Environment:
//
//	PROXIER_BENCH_SIZES             ServiceImports per run (default 1000,10000,30000)
//	PROXIER_BENCH_KUBE_PROXY_SIZES  Services per kube-proxy run (default: PROXIER_BENCH_SIZES)
//	PROXIER_BENCH_KUBE_PROXY        kube-proxy binary; unset or missing skips kube-proxy
//	PROXIER_BENCH_LATENCY_SAMPLES   connects per latency figure (default 500)
package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/klog/v2"
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
	sizes, err := sizesFromEnv("PROXIER_BENCH_SIZES", "1000,10000,30000")
	if err != nil {
		fatal(err)
	}
	kpSizes, err := sizesFromEnv("PROXIER_BENCH_KUBE_PROXY_SIZES", joinSizes(sizes))
	if err != nil {
		fatal(err)
	}
	samples := 500
	if v := os.Getenv("PROXIER_BENCH_LATENCY_SAMPLES"); v != "" {
		if samples, err = strconv.Atoi(v); err != nil || samples < 10 {
			fatal(fmt.Errorf("PROXIER_BENCH_LATENCY_SAMPLES=%q: want a number >= 10", v))
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	fmt.Printf("proxierbench: %d services per size %v, %d TCP ports x %d endpoints each; nft %s\n",
		len(sizes), sizes, len(benchPorts), endpointsPerService, nftVersion())

	mcsd, err := benchProxier(ctx, sizes, samples)
	if err != nil {
		fatal(fmt.Errorf("proxier: %w", err))
	}
	var kp map[int]syncTimes
	if bin := os.Getenv("PROXIER_BENCH_KUBE_PROXY"); bin == "" {
		fmt.Println("kube-proxy: skipped (PROXIER_BENCH_KUBE_PROXY is not set; make bench-proxier sets it)")
	} else if _, err := os.Stat(bin); err != nil {
		fmt.Printf("kube-proxy: skipped (%v)\n", err)
	} else if kp, err = benchKubeProxy(ctx, bin, kpSizes); err != nil {
		fmt.Printf("kube-proxy: stopped early: %v\n", err)
	}
	printSummary(mcsd, kp)
}

// syncTimes are one size's figures: the first full sync, the median of the
// partial syncs after a change to one service, and (the proxier only) the
// periodic table check.
type syncTimes struct {
	full, partial, check time.Duration
}

func printSummary(mcsd, kp map[int]syncTimes) {
	var sizes []int
	seen := map[int]bool{}
	for n := range mcsd {
		sizes, seen[n] = append(sizes, n), true
	}
	for n := range kp {
		if !seen[n] {
			sizes = append(sizes, n)
		}
	}
	sort.Ints(sizes)
	fmt.Println()
	fmt.Println("sync times (as each reports in sync_{full,partial}_proxy_rules_duration_seconds)")
	fmt.Printf("%8s  %12s %12s  %12s %12s  %10s %10s\n", "services", "mcsd full", "kp full", "mcsd partial", "kp partial", "full x", "partial x")
	for _, n := range sizes {
		m, mok := mcsd[n]
		k, kok := kp[n]
		ratio := func(a, b time.Duration) string {
			if !mok || !kok || a <= 0 {
				return "-"
			}
			return fmt.Sprintf("%.1f", float64(b)/float64(a))
		}
		fmt.Printf("%8d  %12s %12s  %12s %12s  %10s %10s\n", n,
			show(m.full, mok), show(k.full, kok), show(m.partial, mok), show(k.partial, kok),
			ratio(m.full, k.full), ratio(m.partial, k.partial))
	}
	fmt.Println("(\"x\" columns: kube-proxy's time over mcsd's)")
	fmt.Println()
	fmt.Println("mcsd's periodic table check (one listing of its nat-prerouting chain, once per sync period)")
	for _, n := range sizes {
		if m, ok := mcsd[n]; ok {
			fmt.Printf("%8d  %12s\n", n, ms(m.check))
		}
	}
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

func nftVersion() string {
	out, err := exec.Command("nft", "--version").Output()
	if err != nil {
		return "(unknown)"
	}
	return strings.TrimSpace(string(out))
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
