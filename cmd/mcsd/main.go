// Command mcsd is the Multi-Cluster Services node daemon. Every replica
// serves the clusterset DNS zone and programs the ClusterSetIP data plane
// (nftables); one elected replica per cluster also exports this cluster's
// ServiceExports to the broker, imports every cluster's services as
// ServiceImports and MCS EndpointSlices, and renews the cluster's heartbeat.
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

	"github.com/mcsd-io/mcsd/clusterid"
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
	if err := o.complete(raw); err != nil {
		fmt.Fprintf(os.Stderr, "mcsd: invalid flags:\n%v\n", err)
		os.Exit(2)
	}
	if err := logsapi.ValidateAndApply(o.logs, nil); err != nil {
		fmt.Fprintf(os.Stderr, "mcsd: logging flags: %v\n", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o); err != nil {
		klog.ErrorS(err, "mcsd failed")
		klog.Flush()
		os.Exit(1)
	}
	klog.Flush()
}

// printUsage prints what mcsd is and its flags, group by group.
func printUsage(w io.Writer, nfs cliflag.NamedFlagSets) {
	fmt.Fprintf(w, "Usage: mcsd [flags]\n\nThe Multi-Cluster Services node daemon: exporter, importer, clusterset DNS and ClusterSetIP proxier.\n")
	cols := 0 // no wrapping, unless w is a terminal
	if f, ok := w.(*os.File); ok {
		if width, _, err := term.GetSize(int(f.Fd())); err == nil {
			cols = width
		}
	}
	cliflag.PrintSections(w, nfs, cols)
}

func run(ctx context.Context, o *options) error {
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
	clusterID, err := clusterid.NewResolver(local.kube, local.dynamic).Resolve(resolveCtx, o.clusterID)
	cancel()
	if err != nil {
		return fmt.Errorf("--cluster-id: %w", err)
	}
	build := version.Get()
	logger.Info("Starting mcsd", "version", build.Version, "revision", build.Revision, "clusterID", clusterID, "components", o.components, "apiServer", localCfg.Host)

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
	if err := serveEndpoints(ctx, o, reg, dp, ctrl); err != nil {
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
