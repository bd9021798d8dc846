package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/miekg/dns"
)

// Throughput is measured with dnsperf, pinned to the core the servers are
// not on: a C load generator that keeps many queries outstanding costs less
// CPU per query than the servers do, so the server, not the generator, sets
// the pace (the table shows both CPU shares). Latency percentiles come from
// the Go closed-loop generator (load.go), which times each query; dnsperf
// only reports a mean.

// perfResult is what one dnsperf run measured.
type perfResult struct {
	completed, lost int64
	elapsed         time.Duration
	meanLatency     time.Duration
	serverCPU       time.Duration
	loadCPU         time.Duration
	loadAvg         string
}

func (r perfResult) qps() float64 { return float64(r.completed) / r.elapsed.Seconds() }

// perCPU is queries per second of server CPU time.
func (r perfResult) perCPU() float64 {
	if r.serverCPU <= 0 {
		return 0
	}
	return float64(r.completed) / r.serverCPU.Seconds()
}

// writeQueryFile writes the sequence in dnsperf's input format.
func writeQueryFile(path string, seq []probe) error {
	var b bytes.Buffer
	for _, p := range seq {
		fmt.Fprintf(&b, "%s %s\n", p.name, dns.TypeToString[p.qtype])
	}
	return os.WriteFile(path, b.Bytes(), 0o644)
}

// runPerf runs dnsperf on loadCPU against s for d, over network ("udp" or
// "tcp"), with EDNS0.
func runPerf(s *server, o options, queryFile, network string, d time.Duration) (perfResult, error) {
	host, port, _ := strings.Cut(s.addr, ":")
	secs := strconv.Itoa(max(1, int(d.Round(time.Second)/time.Second)))
	args := []string{"dnsperf", "-s", host, "-p", port, "-d", queryFile, "-l", secs, "-m", network, "-e",
		"-c", strconv.Itoa(o.perfClients), "-q", strconv.Itoa(o.perfOutstanding), "-T", "1", "-t", "2"}
	cmd := pinned(o.loadCPU, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	res := perfResult{loadAvg: loadAverage()}
	before, err := cpuTime(s.pid())
	if err != nil {
		return res, err
	}
	if err := cmd.Run(); err != nil {
		return res, fmt.Errorf("dnsperf against %s: %w\n%s", s.name, err, out.String())
	}
	after, err := cpuTime(s.pid())
	if err != nil {
		return res, err
	}
	res.serverCPU = after - before
	if ps := cmd.ProcessState; ps != nil {
		res.loadCPU = ps.UserTime() + ps.SystemTime()
	}
	for _, line := range strings.Split(out.String(), "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		f := strings.Fields(v)
		if len(f) == 0 {
			continue
		}
		switch k {
		case "Queries completed":
			res.completed, _ = strconv.ParseInt(f[0], 10, 64)
		case "Queries lost":
			res.lost, _ = strconv.ParseInt(f[0], 10, 64)
		case "Run time (s)":
			sec, _ := strconv.ParseFloat(f[0], 64)
			res.elapsed = time.Duration(sec * float64(time.Second))
		case "Average Latency (s)":
			sec, _ := strconv.ParseFloat(f[0], 64)
			res.meanLatency = time.Duration(sec * float64(time.Second))
		}
	}
	if res.completed == 0 || res.elapsed == 0 {
		return res, fmt.Errorf("dnsperf against %s: no queries completed\n%s", s.name, out.String())
	}
	return res, nil
}

// loadAverage is the 1, 5 and 15 minute load averages of the machine.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// mixedRun is one server's measurements in one round of the mixed load.
type mixedRun struct {
	perf    perfResult
	latency loadResult
}

// benchmark measures both servers: rounds of the mixed load (throughput
// with dnsperf, then latency with the Go generator), alternating which
// server goes first; then each kind of query alone and the mixed load over
// TCP, once per server. It prints the tables as it goes.
//
// The responder runs in the rounds too, as the limit: mcsd's queries per
// server CPU-second are printed as a fraction of its.
func benchmark(servers []*server, responder *server, o options, dir string, load []kind) error {
	mixFile := filepath.Join(dir, "queries-mixed.txt")
	if err := writeQueryFile(mixFile, sequence(load, 50)); err != nil {
		return err
	}
	fmt.Printf("\nthroughput: dnsperf (-c %d -q %d, one thread, EDNS0) on core %d; latency: the Go generator (%d queries outstanding); servers on core %d, metrics on in both\n",
		o.perfClients, o.perfOutstanding, o.loadCPU, o.workers, o.serverCPU)

	runs := map[string][]mixedRun{}
	for round := range o.rounds {
		order := append(slices.Clone(servers), responder)
		if round%2 == 1 {
			slices.Reverse(order)
		}
		for _, s := range order {
			if o.warmup > 0 {
				if _, err := runPerf(s, o, mixFile, "udp", o.warmup); err != nil {
					return err
				}
			}
			p, err := runPerf(s, o, mixFile, "udp", o.duration)
			if err != nil {
				return err
			}
			l, err := measure(s, o, o.duration/2)
			if err != nil {
				return err
			}
			fmt.Printf("  round %d %-8s %9.0f QPS  %9.0f queries/server CPU-s  server CPU %3.0f%%  dnsperf CPU %3.0f%%  p50 %v p99 %v  load average %s\n",
				round+1, s.name, p.qps(), p.perCPU(), 100*p.serverCPU.Seconds()/p.elapsed.Seconds(), 100*p.loadCPU.Seconds()/p.elapsed.Seconds(),
				l.P50.Round(time.Microsecond), l.P99.Round(time.Microsecond), p.loadAvg)
			runs[s.name] = append(runs[s.name], mixedRun{p, l})
		}
	}
	printMixed(append(slices.Clone(servers), responder), runs)

	// Each kind alone, and the mixed load over TCP.
	type single struct {
		label, file, network string
	}
	var singles []single
	for _, want := range []struct{ short, label string }{
		{"A ClusterSetIP", "A ClusterSetIP"},
		{"SRV named", "SRV _port._proto ClusterSetIP"},
		{"SRV bare", "SRV bare name ClusterSetIP"},
		{"A headless", "A headless"},
		{"A per-host", "A <hostname>.<clusterid> headless"},
		{"PTR ClusterSetIP", "PTR ClusterSetIP"},
		{"NXDOMAIN", "NXDOMAIN unknown service"},
	} {
		i := slices.IndexFunc(load, func(k kind) bool { return k.label == want.label })
		if i < 0 {
			fmt.Printf("%s: left out (a server does not answer it)\n", want.short)
			continue
		}
		f := filepath.Join(dir, fmt.Sprintf("queries-%d.txt", i))
		if err := writeQueryFile(f, load[i].probes); err != nil {
			return err
		}
		singles = append(singles, single{want.short, f, "udp"})
	}
	singles = append(singles, single{"mixed, TCP", mixFile, "tcp"})
	d := max(2*time.Second, (o.duration / 3).Round(time.Second))
	fmt.Printf("\neach kind alone (dnsperf, UDP unless noted), %v per server, one run each, alternating which server goes first\n", d)
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "kind\tmcsd QPS\tCoreDNS QPS\tratio\tmcsd q/CPU-s\tCoreDNS q/CPU-s\tratio\tmcsd lost\tCoreDNS lost\tload average\t")
	for i, sg := range singles {
		res := map[string]perfResult{}
		order := slices.Clone(servers)
		if i%2 == 1 {
			slices.Reverse(order)
		}
		for _, s := range order {
			r, err := runPerf(s, o, sg.file, sg.network, d)
			if err != nil {
				return err
			}
			res[s.name] = r
		}
		m, c := res["mcsd"], res["coredns"]
		fmt.Fprintf(tw, "%s\t%.0f\t%.0f\t%.2fx\t%.0f\t%.0f\t%.2fx\t%d\t%d\t%s\t\n", sg.label, m.qps(), c.qps(), m.qps()/c.qps(),
			m.perCPU(), c.perCPU(), m.perCPU()/c.perCPU(), m.lost, c.lost, m.loadAvg)
	}
	return tw.Flush()
}

// printMixed prints the median and spread of the mixed-load rounds.
func printMixed(servers []*server, runs map[string][]mixedRun) {
	stat := func(name string, f func(mixedRun) float64) (median, lo, hi float64) {
		var v []float64
		for _, r := range runs[name] {
			v = append(v, f(r))
		}
		slices.Sort(v)
		return v[len(v)/2], v[0], v[len(v)-1]
	}
	qps := func(r mixedRun) float64 { return r.perf.qps() }
	perCPU := func(r mixedRun) float64 { return r.perf.perCPU() }
	p50 := func(r mixedRun) float64 { return float64(r.latency.P50.Microseconds()) }
	p99 := func(r mixedRun) float64 { return float64(r.latency.P99.Microseconds()) }
	fmt.Printf("\nmixed load, median of %d rounds [min-max]\n", len(runs[servers[0].name]))
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "server\tQPS\tqueries per server CPU-second\tp50 µs\tp99 µs\t")
	med := map[string][4]float64{}
	for _, s := range servers {
		var row [4]float64
		var cells []string
		for i, f := range []func(mixedRun) float64{qps, perCPU, p50, p99} {
			m, lo, hi := stat(s.name, f)
			row[i] = m
			cells = append(cells, fmt.Sprintf("%.0f [%.0f-%.0f]", m, lo, hi))
		}
		med[s.name] = row
		fmt.Fprintf(tw, "%s\t%s\t\n", s.name, strings.Join(cells, "\t"))
	}
	tw.Flush()
	m, c, r := med["mcsd"], med["coredns"], med["responder"]
	fmt.Printf("mcsd / CoreDNS (medians): QPS %.2fx, queries per server CPU-second %.2fx, p50 %.2fx, p99 %.2fx\n",
		m[0]/c[0], m[1]/c[1], m[2]/c[2], m[3]/c[3])
	var perRound []string
	for i := range runs["mcsd"] {
		if i < len(runs["responder"]) {
			perRound = append(perRound, fmt.Sprintf("%.2f", runs["mcsd"][i].perf.perCPU()/runs["responder"][i].perf.perCPU()))
		}
	}
	fmt.Printf("mcsd / the minimal responder (the limit), queries per server CPU-second: %.2fx of the medians (per round: %s); QPS %.2fx\n",
		m[1]/r[1], strings.Join(perRound, " "), m[0]/r[0])
}
