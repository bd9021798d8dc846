// Command mcsd is the Multi-Cluster Services daemon, in two roles
// (--components): the node agent, on every node, serves the clusterset DNS
// zone and programs the ClusterSetIP data plane (nftables); the controller,
// one elected replica per cluster, exports this cluster's ServiceExports to
// the broker, imports every cluster's services as ServiceImports and MCS
// EndpointSlices, and renews the cluster's heartbeat. manifests/mcsd runs
// them as a DaemonSet and a Deployment with their own identities; by
// default one process plays both. `mcsd --cleanup` removes the data plane's
// rules from a node.
//
// Run `mcsd --help` for the flags.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"golang.org/x/term"
	cliflag "k8s.io/component-base/cli/flag"
	logsapi "k8s.io/component-base/logs/api/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/mcsd-io/mcsd/clusterid"
	"github.com/mcsd-io/mcsd/internal/ipfamilies"
	"github.com/mcsd-io/mcsd/internal/memlimit"
	"github.com/mcsd-io/mcsd/internal/version"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "probe" {
		// kubectl mcs verify's probe, in pods of this image.
		os.Exit(runProbe(os.Args[2:], os.Stdout, os.Stderr))
	}
	o := &options{}
	fs, nfs, raw := o.flagSets()
	if err := fs.Parse(os.Args[1:]); err != nil {
		fmt.Fprintf(os.Stderr, "mcsd: %v\nRun 'mcsd --help' for the flags.\n", err)
		os.Exit(2)
	}
	switch {
	case o.help:
		printUsage(os.Stdout, nfs)
		os.Exit(0)
	case o.version:
		fmt.Println("mcsd", version.Get())
		os.Exit(0)
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "mcsd: unexpected arguments %q; every setting is a flag (see --help)\n", fs.Args())
		os.Exit(2)
	}
	if o.cleanup {
		// Only --netns counts: the node may have no cluster to talk to.
		if err := cleanup(o); err != nil {
			fmt.Fprintf(os.Stderr, "mcsd --cleanup: %v\n", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	if err := o.complete(raw); err != nil {
		fmt.Fprintf(os.Stderr, "mcsd: invalid flags:\n%v\n", err)
		os.Exit(2)
	}
	if err := logsapi.ValidateAndApply(o.logs, nil); err != nil {
		fmt.Fprintf(os.Stderr, "mcsd: logging flags: %v\n", err)
		os.Exit(2)
	}
	// The container's memory limit bounds the heap's growth between
	// collections (an explicit GOMEMLIMIT wins).
	limit, source, err := memlimit.Set("/sys/fs/cgroup")
	if err != nil {
		fmt.Fprintf(os.Stderr, "mcsd: %v\n", err)
		os.Exit(2)
	}
	if limit > 0 {
		klog.InfoS("Go memory limit set", "bytes", limit, "from", source)
	}
	signals := make(chan os.Signal, 2)
	signal.Notify(signals, os.Interrupt, syscall.SIGTERM)
	ctx, d := startDrain(context.Background(), clock.RealClock{}, o.shutdownDelay, signals)
	if err := run(ctx, o, d); err != nil {
		klog.ErrorS(err, "mcsd failed")
		klog.Flush()
		os.Exit(1)
	}
	klog.Flush()
}

// printUsage prints what mcsd is and its flags, group by group.
func printUsage(w io.Writer, nfs cliflag.NamedFlagSets) {
	fmt.Fprintf(w, "Usage: mcsd [flags]\n\nThe Multi-Cluster Services daemon: exporter and importer (the controller, --components=exporter,importer), clusterset DNS and ClusterSetIP proxier (the node agent, --components=dns,proxier).\n")
	cols := 0 // no wrapping, unless w is a terminal
	if f, ok := w.(*os.File); ok {
		if width, _, err := term.GetSize(int(f.Fd())); err == nil {
			cols = width
		}
	}
	cliflag.PrintSections(w, nfs, cols)
}

func run(ctx context.Context, o *options, d *drain) error {
	logger := klog.FromContext(ctx)
	reg := newRegistry()
	localCfg, err := localConfig(o)
	if err != nil {
		return err
	}
	local, err := newClients(localCfg, o.clientQPS, o.clientBurst)
	if err != nil {
		return fmt.Errorf("local cluster clients: %w", err)
	}
	resolveCtx, cancel := context.WithTimeout(ctx, time.Minute)
	resolver := clusterid.NewResolver(local.kube, local.dynamic)
	var clusterID string
	if o.runsControllers() {
		clusterID, err = resolver.Resolve(resolveCtx, o.clusterID)
	} else {
		// The node agent writes nothing cluster-wide: the controller
		// records the ID, the node agent reads it.
		clusterID, err = resolver.Await(resolveCtx, o.clusterID)
	}
	cancel()
	if err != nil {
		return fmt.Errorf("--cluster-id: %w", err)
	}
	if len(o.ipFamilies) == 0 {
		familiesCtx, cancel := context.WithTimeout(ctx, time.Minute)
		o.ipFamilies, err = ipfamilies.Served(familiesCtx, local.kube, ipfamilies.KernelHasIPv6)
		cancel()
		if err != nil {
			return err
		}
	}
	build := version.Get()
	logger.Info("Starting mcsd", "version", build.Version, "revision", build.Revision, "clusterID", clusterID, "components", o.components, "ipFamilies", o.ipFamilies, "apiServer", localCfg.Host)

	var dp *nodeAgent
	if o.runs(componentDNS) || o.runs(componentProxier) {
		if dp, err = newNodeAgent(o, local, clusterID, reg); err != nil {
			return err
		}
	}
	var ctrl *controllers
	if o.runsControllers() {
		ctrl = newControllers(o, local, clusterID, reg, dp)
	}

	ctx, cancel = context.WithCancel(ctx)
	defer cancel()
	if err := serveEndpoints(ctx, o, clusterID, reg, local.kube, dp, ctrl, d); err != nil {
		return err
	}
	errc := make(chan error, 2)
	running := 0
	if dp != nil {
		running++
		go func() { errc <- dp.run(ctx, o, local) }()
	}
	if ctrl != nil {
		running++
		go func() { errc <- runElected(ctx, o, local, ctrl) }()
	}
	var first error
	var deadline <-chan time.Time
	for running > 0 {
		select {
		case err := <-errc:
			running--
			if err != nil && first == nil {
				// One component failing stops the daemon: its supervisor
				// restarts it whole rather than leaving it half running.
				first = err
				cancel()
			}
		case <-ctx.Done():
			if deadline == nil {
				deadline = time.After(o.shutdownGracePeriod)
			}
		case <-deadline:
			logger.Info("Components did not stop within the grace period; exiting anyway", "gracePeriod", o.shutdownGracePeriod, "stillRunning", running)
			return first
		}
	}
	logger.Info("Stopped mcsd")
	return first
}
