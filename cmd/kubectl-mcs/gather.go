package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/mcsd-io/mcsd/kubectlmcs/gather"
)

type gatherOptions struct {
	output, clusterID, namespace, brokerNS string
	lines                                  int64
}

func newGatherCmd(g *globals) *cobra.Command {
	o := &gatherOptions{}
	cmd := &cobra.Command{
		Use:   "gather",
		Short: "Collect a member's MCS objects, mcsd's logs and its broker records into a tar.gz",
		Long: `Collect, for a report about the member cluster of --context, a tar.gz of:
its ServiceExports, ServiceImports, MCS EndpointSlices, ClusterProperties and
MCS CRDs; mcsd's (in --namespace) DaemonSet and Deployment, pods, Services, Leases, ConfigMaps and events,
and the logs of its pods; CoreDNS's ConfigMap; and, read with the member's
own broker credentials, this cluster's records on the broker (export
records, EndpointSlices, Lease, claims, declaration) and the clusterset's
status. Secrets are never included. What cannot be read is listed in
errors.txt inside the archive.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := g.memberConfig("")
			if err != nil {
				return err
			}
			if o.output == "" {
				o.output = "mcsd-gather-" + time.Now().UTC().Format("20060102T150405Z") + ".tar.gz"
			}
			f, err := os.OpenFile(o.output, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
			if err != nil {
				return err
			}
			if o.namespace == "" {
				o.namespace = g.mcsdNamespace()
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), 2*time.Minute)
			defer cancel()
			names, err := gather.Write(ctx, f, cfg, gather.Options{ClusterID: o.clusterID, Namespace: o.namespace, BrokerNamespace: o.brokerNS, LogLines: o.lines})
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
			fmt.Fprintf(g.streams.Out, "wrote %s (%d files)\n", o.output, len(names))
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.output, "output", "", "the archive to write (default mcsd-gather-<time>.tar.gz)")
	f.StringVar(&o.clusterID, "cluster-id", "", "the member's cluster ID (default: resolved as mcsd does)")
	f.StringVar(&o.namespace, "mcsd-namespace", "", "the namespace mcsd runs in")
	_ = f.MarkDeprecated("mcsd-namespace", "use --namespace")
	f.StringVar(&o.brokerNS, "broker-namespace", "", "the broker namespace (default: that of the member's broker kubeconfig)")
	f.Int64Var(&o.lines, "log-lines", 2000, "the last lines of each mcsd container's log to keep")
	return cmd
}
