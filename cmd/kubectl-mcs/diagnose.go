package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/mcsd-io/mcsd/kubectlmcs/diagnose"
	"github.com/mcsd-io/mcsd/liveness"
)

type diagnoseOptions struct {
	out       outputFlag
	clusterID string
	brokerNS  string
	skew      time.Duration
	ttl       time.Duration
	peers     []string
	skipReach bool
	reachWait time.Duration
}

func newDiagnoseCmd(g *globals) *cobra.Command {
	o := &diagnoseOptions{}
	cmd := &cobra.Command{
		Use:   "diagnose",
		Short: "Check a member cluster's part of the clusterset, with a fix for each failure",
		Long: `Check the member cluster of --context: the CRDs and their served versions,
its cluster ID and the rule that keeps it unchanged, its broker credentials
(the Secret mcsd-system/mcsd-broker) and what the broker lets them do (a
dry-run write of its own Lease must pass, one of another cluster's must be
refused), its declaration, its heartbeat Lease, its ClusterSetIP blocks, clock skew against the
broker, overlapping CIDRs across the clusters' declarations, CoreDNS
forwarding clusterset.local to mcsd, and every node agent ready. It warns
(WARN, which does not fail the run) of each namespace that several members
export and no export rule covers: any member may export services there
too, first or alongside (kubectl mcs broker export-rules).

With --peer-contexts, the contexts of other members, it also checks that
pods of the member and of each of them reach each other's pod IPs, as MCS
needs: a probe pod of mcsd's own image in each (the image their mcsd runs;
restricted, labelled mcsd.io/diagnose=reachability, removed afterwards, in
mcsd-system), and a pod in each connecting to the other's probe. A check
per direction passes, or fails naming the route that is missing: which
cluster lacks a route to which declared pod CIDR, and via which nodes
(docs/install/flat-network.md). --skip-reachability leaves it out where
pods may not be created.

Exits 1 when a check fails.`,
		Example: `  kubectl mcs diagnose --context east
  kubectl mcs diagnose --context east --peer-contexts west,north`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.out.validate(); err != nil {
				return err
			}
			if o.skipReach && len(o.peers) > 0 {
				return errors.New("--skip-reachability and --peer-contexts: give one or the other")
			}
			cfg, err := g.memberConfig("")
			if err != nil {
				return err
			}
			opts := diagnose.Options{
				ClusterID: o.clusterID, BrokerNamespace: o.brokerNS, MaxClockSkew: o.skew, ClusterTTL: o.ttl,
				SkipReachability: o.skipReach, ReachTimeout: o.reachWait,
			}
			for _, name := range o.peers {
				peer, err := g.contextConfig(name)
				if err != nil {
					return fmt.Errorf("--peer-contexts: %w", err)
				}
				opts.Peers = append(opts.Peers, diagnose.Peer{Name: name, Config: peer})
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), 4*time.Minute)
			defer cancel()
			checks, err := diagnose.Run(ctx, cfg, opts)
			if err != nil {
				return err
			}
			done, err := o.out.print(g.streams.Out, checks)
			if !done {
				w := newTable(g.streams.Out)
				fmt.Fprintln(w, "RESULT\tCHECK\tDETAIL")
				for _, c := range checks {
					fmt.Fprintf(w, "%s\t%s\t%s\n", c.Result, c.Name, c.Detail)
					if c.Fix != "" {
						fmt.Fprintf(w, "\t\tfix: %s\n", c.Fix)
					}
				}
				err = w.Flush()
			}
			if err != nil {
				return err
			}
			if diagnose.Failed(checks) {
				return exitError{code: 1}
			}
			return nil
		},
	}
	o.out.add(cmd)
	f := cmd.Flags()
	f.StringVar(&o.clusterID, "cluster-id", "", "the member's cluster ID (default: resolved as mcsd does)")
	f.StringVar(&o.brokerNS, "broker-namespace", "", "the broker namespace (default: that of the member's broker kubeconfig)")
	f.DurationVar(&o.skew, "max-clock-skew", diagnose.DefaultMaxClockSkew, "the clock skew allowed between a cluster and the broker")
	f.DurationVar(&o.ttl, "cluster-ttl", liveness.DefaultTTL, "how old the member's Lease may be (as mcsd's --cluster-ttl)")
	f.StringSliceVar(&o.peers, "peer-contexts", nil, "kubeconfig contexts of other members, comma-separated: check that pods of the member and theirs reach each other")
	f.BoolVar(&o.skipReach, "skip-reachability", false, "leave out the pod reachability check (no pods are created)")
	f.DurationVar(&o.reachWait, "reachability-timeout", diagnose.DefaultReachTimeout, "how long a probe pod tries to connect to another member's")
	return cmd
}
