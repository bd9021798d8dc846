// Command dnsbench compares mcsd's DNS server with CoreDNS's kubernetes
// plugin in multicluster mode: same API server, same ServiceImports and MCS
// EndpointSlices, same query mix, each server pinned to one core with
// metrics on, the load on the other core. It prints, for every kind of
// query in the mix, where their answers differ and which one the MCS DNS
// specification supports; then queries per second and per server
// CPU-second (dnsperf) and latency percentiles (a Go closed-loop
// generator) for the mixed load, median and spread of rounds alternating
// which server goes first, beside a minimal UDP responder on the same core
// under the same load (the limit: a fixed answer, batched reads and
// writes); then each main kind of query alone, and the mixed load over
// TCP. It prints numbers and the load average; it never
// passes or fails on them. It needs root (the harness), taskset and
// dnsperf, and sends traffic only to 127.0.0.1.
//
//	make bench-dns
//	go run ./test/cmd/dnsbench -coredns PATH [-duration 10s] [-services 1000] [-headless 100] [-endpoints 10]
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/miekg/dns"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"

	"github.com/mcsd-io/mcsd/test/lib/harness"
)

type options struct {
	coredns                       string
	duration, warmup              time.Duration
	services, headless, endpoints int
	workers                       int
	serverCPU, loadCPU            int
	probesPerKind                 int
	rounds                        int
	perfClients, perfOutstanding  int
	// kinds are the indexes of the kinds of the mix the load asks.
	kinds string
}

func main() {
	var o options
	flag.StringVar(&o.coredns, "coredns", "", "the CoreDNS binary (test/tools/coredns/build.sh builds it)")
	flag.DurationVar(&o.duration, "duration", 10*time.Second, "how long to load each server")
	flag.DurationVar(&o.warmup, "warmup", 2*time.Second, "load before each measured run, not counted")
	flag.IntVar(&o.services, "services", 1000, "ClusterSetIP ServiceImports")
	flag.IntVar(&o.headless, "headless", 100, "headless ServiceImports")
	flag.IntVar(&o.endpoints, "endpoints", 10, "ready endpoints per headless ServiceImport")
	flag.IntVar(&o.workers, "workers", 32, "queries the load generator keeps outstanding")
	flag.IntVar(&o.serverCPU, "server-cpu", 0, "the core the servers run on")
	flag.IntVar(&o.loadCPU, "load-cpu", 1, "the core the load generator runs on")
	flag.IntVar(&o.probesPerKind, "probes", 50, "queries of each kind whose answers are compared")
	flag.IntVar(&o.rounds, "rounds", 3, "rounds of the mixed load per server, alternating which server goes first")
	flag.IntVar(&o.perfClients, "perf-clients", 8, "dnsperf's -c: its sockets")
	flag.IntVar(&o.perfOutstanding, "perf-outstanding", 256, "dnsperf's -q: queries it keeps outstanding")
	serveMode := flag.Bool("serve-mcsd", false, "internal: serve mcsd's DNS from -kubeconfig on -listen")
	responderMode := flag.Bool("serve-responder", false, "internal: run the minimal UDP responder on -listen")
	loadMode := flag.String("load", "", "internal: load the server at this address and print JSON")
	kubeconfig := flag.String("kubeconfig", "", "internal: for -serve-mcsd")
	listen := flag.String("listen", "", "internal: for -serve-mcsd")
	flag.StringVar(&o.kinds, "kinds", "", "internal: for -load, the kinds of the mix to ask, by index")
	klog.InitFlags(nil)
	flag.Parse()

	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	var err error
	switch {
	case *serveMode:
		err = serveMCSD(ctx, *kubeconfig, *listen)
	case *responderMode:
		err = serveResponder(ctx, *listen)
	case *loadMode != "":
		err = runLoad(*loadMode, o)
	default:
		err = run(ctx, o)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "dnsbench:", err)
		os.Exit(1)
	}
}

// runLoad is the -load mode.
func runLoad(addr string, o options) error {
	all := buildMix(newDataset(o.services, o.headless, o.endpoints))
	var kinds []kind
	for _, f := range strings.Split(o.kinds, ",") {
		i, err := strconv.Atoi(f)
		if err != nil || i < 0 || i >= len(all) {
			return fmt.Errorf("-kinds %q: %q is not a kind", o.kinds, f)
		}
		kinds = append(kinds, all[i])
	}
	queries, err := packQueries(sequence(kinds, 50))
	if err != nil {
		return err
	}
	res, err := generate(addr, queries, o.workers, o.duration)
	if err != nil {
		return err
	}
	return json.NewEncoder(os.Stdout).Encode(res)
}

func run(ctx context.Context, o options) error {
	if o.coredns == "" {
		return fmt.Errorf("-coredns is required; build it with: bash test/tools/coredns/build.sh .cache/coredns")
	}
	if _, err := exec.LookPath("taskset"); err != nil {
		return fmt.Errorf("taskset is needed to pin the servers to a core (apt-get install util-linux): %w", err)
	}
	if _, err := exec.LookPath("dnsperf"); err != nil {
		return fmt.Errorf("dnsperf is needed to load the servers (apt-get install dnsperf): %w", err)
	}
	coreVersion, _ := exec.Command(o.coredns, "-version").Output()

	began := time.Now()
	cs, err := harness.Up(ctx, harness.Options{Clusters: 1})
	if err != nil {
		return fmt.Errorf("starting the harness: %w", err)
	}
	defer cs.Close()
	member := cs.Members[0]
	fmt.Printf("API server %s ready in %v\n", member.Server(), time.Since(began).Round(time.Millisecond))

	// Each server reads with its own user and only the permissions it
	// needs.
	kubeconfigs := map[string]string{}
	for user, coreExtras := range map[string]bool{"mcsd-dns": false, "coredns": true} {
		if err := grant(ctx, member.Kube, readerRole("bench:"+user, coreExtras), user); err != nil {
			return err
		}
		cfg, err := member.UserConfig(user)
		if err != nil {
			return err
		}
		kubeconfigs[user] = cs.Dir + "/" + user + ".kubeconfig"
		if err := member.WriteKubeconfig(kubeconfigs[user], cfg); err != nil {
			return err
		}
	}

	d := newDataset(o.services, o.headless, o.endpoints)
	began = time.Now()
	if err := d.load(ctx, member.Kube, member.MCS); err != nil {
		return err
	}
	fmt.Printf("created %d ClusterSetIP and %d headless ServiceImports (%d ready endpoints each) in %v\n",
		len(d.clusterSet), len(d.headless), o.endpoints, time.Since(began).Round(time.Millisecond))

	mcsd, err := startMCSD(cs.Dir, kubeconfigs["mcsd-dns"], o.serverCPU)
	if err != nil {
		return err
	}
	defer mcsd.stop()
	core, err := startCoreDNS(o.coredns, cs.Dir, kubeconfigs["coredns"], o.serverCPU)
	if err != nil {
		return err
	}
	defer core.stop()
	servers := []*server{mcsd, core}
	responder, err := startResponder(cs.Dir, o.serverCPU)
	if err != nil {
		return err
	}
	defer responder.stop()

	kinds := buildMix(d)
	for _, s := range servers {
		if err := waitLoaded(ctx, s, d, kinds); err != nil {
			return fmt.Errorf("%w (log in %s)", err, cs.Dir)
		}
	}

	fmt.Printf("\nmcsd DNS vs CoreDNS %s", strings.TrimSpace(string(coreVersion)))
	fmt.Printf("\nload average %s\n", loadAverage())
	// Answers first: a kind of query a server leaves unanswered would stall
	// the closed-loop load generator for a second each time and measure
	// timeouts instead of the server, so the load leaves such kinds out.
	unanswered, err := compareAnswers(servers, kinds, o.probesPerKind)
	if err != nil {
		return err
	}
	var asked []string
	var load []kind
	for i, k := range kinds {
		if unanswered[i] != "" {
			fmt.Printf("left out of the load: %s (%s gives no answer)\n", k.label, unanswered[i])
			continue
		}
		asked = append(asked, strconv.Itoa(i))
		load = append(load, k)
	}
	o.kinds = strings.Join(asked, ",")
	printMix(load)

	return benchmark(servers, responder, o, cs.Dir, load)
}

// waitLoaded waits until the server answers the last service of each kind
// as the spec says: it has synced and holds the whole dataset.
func waitLoaded(ctx context.Context, s *server, d *dataset, kinds []kind) error {
	var checks []probe
	for _, k := range kinds {
		if k.label == "A ClusterSetIP" || k.label == "A headless" {
			checks = append(checks, k.probes[len(k.probes)-1])
		}
	}
	var last string
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 3*time.Minute, true, func(context.Context) (bool, error) {
		for _, p := range checks {
			r, err := ask(s.addr, p.name, p.qtype)
			if err != nil {
				last = err.Error()
				return false, nil
			}
			if ok, why := p.want.conforms(r.Rcode, records(r)); !ok {
				last = p.name + ": " + why
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("%s never answered the whole dataset: %s", s.name, last)
	}
	return nil
}

// measure runs the load generator on its own core against s.
func measure(s *server, o options, d time.Duration) (loadResult, error) {
	self, err := os.Executable()
	if err != nil {
		return loadResult{}, err
	}
	cmd := pinned(o.loadCPU, self, "-load", s.addr, "-duration", d.String(), "-workers", strconv.Itoa(o.workers),
		"-services", strconv.Itoa(o.services), "-headless", strconv.Itoa(o.headless), "-endpoints", strconv.Itoa(o.endpoints), "-kinds", o.kinds)
	var stdout bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, os.Stderr
	cpuBefore, err := cpuTime(s.pid())
	if err != nil {
		return loadResult{}, err
	}
	if err := cmd.Run(); err != nil {
		return loadResult{}, fmt.Errorf("load generator against %s: %w", s.name, err)
	}
	cpuAfter, err := cpuTime(s.pid())
	if err != nil {
		return loadResult{}, err
	}
	var res loadResult
	if err := json.Unmarshal(stdout.Bytes(), &res); err != nil {
		return res, fmt.Errorf("load generator output %q: %w", stdout.String(), err)
	}
	res.ServerCPU = cpuAfter - cpuBefore
	return res, nil
}

func printMix(kinds []kind) {
	total := 0
	for _, k := range kinds {
		total += k.weight
	}
	var parts []string
	for _, k := range kinds {
		parts = append(parts, fmt.Sprintf("%s %.1f%%", k.label, float64(k.weight)*100/float64(total)))
	}
	fmt.Printf("\nload: %s\n", strings.Join(parts, ", "))
}

// records are the answer section in comparable form, sorted.
func records(m *dns.Msg) []string {
	var out []string
	for _, rr := range m.Answer {
		out = append(out, record(rr))
	}
	slices.Sort(out)
	return out
}

// compareAnswers asks both servers up to n probes of each kind and prints,
// per kind, how often their answers differ (rcode or answer set), whether
// each conforms to the spec, and one example of a difference. It returns,
// by kind index, the servers that left some probe of the kind unanswered.
func compareAnswers(servers []*server, kinds []kind, n int) (map[int]string, error) {
	unanswered := map[int]string{}
	fmt.Printf("\nanswers compared (rcode and answer set; owner, TTL and SRV priority/weight ignored), up to %d queries per kind\n", n)
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "kind\tspec\tdiffer\tmcsd conforms\tCoreDNS conforms\tverdict")
	var examples []string
	for ki, k := range kinds {
		probes := k.probes[:min(n, len(k.probes))]
		differ := 0
		conform := make([]int, len(servers))
		why := make([]string, len(servers))
		var example string
		for _, p := range probes {
			var got []string
			for i, s := range servers {
				r, err := ask(s.addr, p.name, p.qtype)
				if err != nil {
					// No answer at all (the load generator counts these
					// as lost): it conforms to nothing.
					got = append(got, "no answer")
					if !strings.Contains(unanswered[ki], s.name) {
						unanswered[ki] = strings.TrimPrefix(unanswered[ki]+", "+s.name, ", ")
					}
					if why[i] == "" {
						why[i] = fmt.Sprintf("no answer within %v", lostAfter)
					}
					continue
				}
				recs := records(r)
				got = append(got, fmt.Sprintf("%s [%s]", dns.RcodeToString[r.Rcode], strings.Join(recs, ", ")))
				if ok, w := p.want.conforms(r.Rcode, recs); ok {
					conform[i]++
				} else if why[i] == "" {
					why[i] = w
				}
			}
			if got[0] != got[1] {
				differ++
				if example == "" {
					example = fmt.Sprintf("%s %s\n    mcsd:    %s\n    CoreDNS: %s", p.name, dns.TypeToString[p.qtype], abbreviateAnswer(got[0]), abbreviateAnswer(got[1]))
				}
			}
		}
		v := verdict(k, probes, differ, conform, why)
		fmt.Fprintf(tw, "%s\t%s\t%d/%d\t%d/%d\t%d/%d\t%s\n", k.label, k.rule, differ, len(probes), conform[0], len(probes), conform[1], len(probes), v)
		if example != "" {
			examples = append(examples, fmt.Sprintf("  %s: %s", k.label, example))
		}
	}
	tw.Flush()
	if len(examples) > 0 {
		fmt.Println("\nfirst difference of each kind:")
		for _, e := range examples {
			fmt.Println(e)
		}
	}
	return unanswered, nil
}

// verdict says which server the spec supports for a kind of query.
func verdict(k kind, probes []probe, differ int, conform []int, why []string) string {
	all := len(probes)
	switch {
	case len(probes) > 0 && probes[0].want.unspecified:
		if differ == 0 {
			return "same answers; the spec is silent"
		}
		return "they differ; the spec is silent"
	case conform[0] == all && conform[1] == all && differ == 0:
		return "same answers, both conform"
	case conform[0] == all && conform[1] == all:
		return "they differ, both conform"
	case conform[0] == all:
		return "spec supports mcsd; CoreDNS: " + why[1]
	case conform[1] == all:
		return "spec supports CoreDNS; mcsd: " + why[0]
	default:
		return "neither conforms; mcsd: " + why[0] + "; CoreDNS: " + why[1]
	}
}

// abbreviateAnswer keeps long answers readable.
func abbreviateAnswer(s string) string {
	if len(s) <= 160 {
		return s
	}
	return s[:157] + "..."
}
