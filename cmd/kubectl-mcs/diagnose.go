package main

import (
	"context"
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
broker, overlapping CIDRs across the clusters' declarations, and CoreDNS
forwarding clusterset.local to mcsd. Exits 1 when a check fails.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.out.validate(); err != nil {
				return err
			}
			cfg, err := g.memberConfig("")
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), 2*time.Minute)
			defer cancel()
			checks, err := diagnose.Run(ctx, cfg, diagnose.Options{ClusterID: o.clusterID, BrokerNamespace: o.brokerNS, MaxClockSkew: o.skew, ClusterTTL: o.ttl})
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
	return cmd
}
