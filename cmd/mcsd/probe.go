package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/mcsd-io/mcsd/kubectlmcs/verify"
)

// runProbe is `mcsd probe serve|check|install`. Serve and check are what
// kubectl mcs verify and diagnose run in pods of mcsd's image: serve
// answers TCP connections with a line naming the cluster and the pod; check
// resolves and connects to targets through the pod's DNS and prints one
// JSON result a target. With --datagrams, check also sends UDP datagrams
// naming its pod to the targets and serve logs those it receives, which
// tells a broken way there from a broken way back. Install is the chart's
// helm test: it checks, from a pod of the cluster, that mcsd's node agents,
// DNS Service and controller answer (installProbe), and prints a line per
// thing checked.
func runProbe(args []string, stdout, stderr io.Writer) int {
	usage := "usage: mcsd probe serve --listen=:8080 --identity=CLUSTER [--datagrams] | mcsd probe check [--timeout=2m] [--expect=TARGET=CLUSTER ...] [--datagrams] NAME:PORT ... | mcsd probe install [--namespace=NS] [--timeout=2m]"
	if len(args) == 0 {
		fmt.Fprintln(stderr, usage)
		return 2
	}
	fs := pflag.NewFlagSet("mcsd probe "+args[0], pflag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", ":8080", "serve: the TCP address to answer on")
	identity := fs.String("identity", "", "serve: the cluster ID to answer with (the pod's name, $POD_NAME, follows)")
	timeout := fs.Duration("timeout", 2*time.Minute, "check: how long to try each target; install: how long to try until everything passes")
	interval := fs.Duration("interval", 500*time.Millisecond, "check, install: the time between two tries")
	expect := fs.StringArray("expect", nil, "check: TARGET=CLUSTER, the cluster whose probe the target must reach")
	namespace := fs.String("namespace", os.Getenv("POD_NAMESPACE"), "install: the namespace mcsd is installed in (default $POD_NAMESPACE)")
	kubeconfig := fs.String("kubeconfig", "", "install: the cluster's kubeconfig (default: the pod's service account)")
	nodeAgents := fs.String("node-agents", "mcsd-node-agent", "install: the node agents' DaemonSet")
	controller := fs.String("controller", "mcsd-controller", "install: the controller's Deployment")
	dnsService := fs.String("dns-service", "mcsd-dns", "install: the Service in front of the node agents' DNS")
	datagrams := fs.Bool("datagrams", false, "serve: also log each UDP datagram to the --listen port; check: also send the targets UDP datagrams naming the pod ($POD_NAME), every --interval")
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	switch args[0] {
	case "serve":
		if *identity == "" {
			fmt.Fprintln(stderr, "mcsd probe serve: --identity is required")
			return 2
		}
		ln, err := net.Listen("tcp", *listen)
		if err != nil {
			fmt.Fprintf(stderr, "mcsd probe serve: --listen: %v\n", err)
			return 1
		}
		if *datagrams {
			pc, err := net.ListenPacket("udp", *listen)
			if err != nil {
				fmt.Fprintf(stderr, "mcsd probe serve: --listen (UDP): %v\n", err)
				return 1
			}
			go func() {
				if err := verify.ServeDatagrams(ctx, pc, stdout); err != nil {
					fmt.Fprintf(stderr, "mcsd probe serve: datagrams: %v\n", err)
				}
			}()
		}
		if err := verify.Serve(ctx, ln, *identity+" "+os.Getenv("POD_NAME")); err != nil {
			fmt.Fprintf(stderr, "mcsd probe serve: %v\n", err)
			return 1
		}
		return 0
	case "check":
		want := map[string]string{}
		for _, e := range *expect {
			target, cluster, ok := strings.Cut(e, "=")
			if !ok {
				fmt.Fprintf(stderr, "mcsd probe check: --expect %q is not TARGET=CLUSTER\n", e)
				return 2
			}
			want[target] = cluster
		}
		ctx, cancel := context.WithTimeout(ctx, *timeout)
		defer cancel()
		if *datagrams {
			go verify.SendDatagrams(ctx, fs.Args(), os.Getenv("POD_NAME"), *interval)
		}
		status := 0
		enc := json.NewEncoder(stdout)
		for _, r := range verify.Check(ctx, fs.Args(), want, *interval) {
			if !r.OK() {
				status = 1
			}
			_ = enc.Encode(r)
		}
		return status
	case "install":
		if *namespace == "" {
			fmt.Fprintln(stderr, "mcsd probe install: --namespace is required (or $POD_NAMESPACE)")
			return 2
		}
		o := &options{kubeconfig: *kubeconfig}
		cfg, err := localConfig(o)
		if err != nil {
			fmt.Fprintf(stderr, "mcsd probe install: %v\n", err)
			return 2
		}
		cfg.UserAgent = rest.DefaultKubernetesUserAgent() + " " + userAgent + "-probe"
		kube, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			fmt.Fprintf(stderr, "mcsd probe install: %v\n", err)
			return 2
		}
		p := &installProbe{
			kube: kube, namespace: *namespace, nodeAgents: *nodeAgents, controller: *controller, dnsService: *dnsService,
			http: &http.Client{Timeout: 5 * time.Second}, try: 2 * time.Second,
		}
		ctx, cancel := context.WithTimeout(ctx, *timeout)
		defer cancel()
		if !p.run(ctx, stdout, *interval) {
			return 1
		}
		return 0
	}
	fmt.Fprintln(stderr, usage)
	return 2
}
