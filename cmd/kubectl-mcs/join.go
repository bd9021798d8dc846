package main

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"

	"github.com/mcsd-io/mcsd/broker"
	"github.com/mcsd-io/mcsd/clusterset/membership"
	"github.com/mcsd-io/mcsd/clusterset/status"
)

type joinOptions struct {
	memberContext, clusterID, podCIDRs string
	brokerServer, brokerNamespace      string
	// output, when set, is where the member's broker kubeconfig is
	// written too.
	output   string
	noSecret bool
}

func newJoinCmd(g *globals) *cobra.Command {
	o := &joinOptions{}
	cmd := &cobra.Command{
		Use:   "join",
		Short: "Join a member cluster to the broker",
		Long: `Join the member cluster of --context (or --member-context) to the broker of
--broker-context: declare its pod CIDRs on the broker (ConfigMap
mcsd-member-<cluster-id>), create its broker identity (ServiceAccount
cluster-<cluster-id>, RoleBinding to the Role mcsd-member, a token; owned by
the declaration), raise the broker's quota by one member budget, and store a
kubeconfig of that identity in the member as the Secret
mcsd-system/mcsd-broker, which mcsd reads (--broker-secret).

The cluster ID is --cluster-id, else the member's ClusterProperty
cluster.clusterset.k8s.io, else the UID of its kube-system namespace: what
mcsd resolves itself. Joining again replaces the pod CIDRs and the Secret.`,
		Example: `  kubectl mcs join --broker-context BROKER --context MEMBER \
      --pod-cidrs 10.244.0.0/16,fd00:10:244::/56 --broker-server https://broker.example.com:6443`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.run(cmd.Context(), g)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.memberContext, "member-context", "", "kubeconfig context of the member cluster (default --context)")
	f.StringVar(&o.clusterID, "cluster-id", "", "the member's cluster ID (default: its ClusterProperty cluster.clusterset.k8s.io, else its kube-system UID)")
	f.StringVar(&o.podCIDRs, "pod-cidrs", "", "the member's pod CIDRs, comma-separated (required): the broker refuses its endpoints outside them")
	f.StringVar(&o.brokerServer, "broker-server", "", "the broker API server's URL as the member's nodes reach it (default: the server of --broker-context)")
	f.StringVar(&o.brokerNamespace, "broker-namespace", broker.DefaultNamespace, "the broker namespace")
	f.StringVar(&o.output, "output", "", "also write the member's broker kubeconfig to this file")
	f.BoolVar(&o.noSecret, "no-secret", false, "do not write the Secret in the member")
	return cmd
}

func parsePrefixes(s string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, c := range strings.Split(s, ",") {
		if c = strings.TrimSpace(c); c == "" {
			continue
		}
		p, err := netip.ParsePrefix(c)
		if err != nil {
			return nil, fmt.Errorf("%q is not a CIDR", c)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

func (o *joinOptions) run(ctx context.Context, g *globals) error {
	if g.brokerContext == "" {
		return errors.New("--broker-context is required: the broker's administrator declares the member")
	}
	cidrs, err := parsePrefixes(o.podCIDRs)
	if err != nil {
		return fmt.Errorf("--pod-cidrs: %w", err)
	}
	if len(cidrs) == 0 {
		return errors.New("--pod-cidrs is required: the broker refuses a member's endpoints outside its declared pod CIDRs")
	}
	brokerCfg, err := g.brokerConfig()
	if err != nil {
		return err
	}
	memberCfg, err := g.memberConfig(o.memberContext)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	progress := func(format string, args ...any) {
		fmt.Fprintf(g.streams.ErrOut, "join: "+format+"\n", args...)
	}
	res, err := membership.Join(ctx, brokerCfg, memberCfg, membership.Options{
		BrokerNamespace: o.brokerNamespace,
		ClusterID:       o.clusterID,
		PodCIDRs:        cidrs,
		BrokerServer:    o.brokerServer,
		NoSecret:        o.noSecret,
		Progress:        progress,
	})
	if err != nil {
		return err
	}
	if o.output != "" {
		if err := os.WriteFile(o.output, res.Kubeconfig, 0o600); err != nil {
			return err
		}
		progress("wrote %s", o.output)
	}
	fmt.Fprintf(g.streams.Out, "cluster %s joined the broker as %s/%s\n", res.ClusterID, o.brokerNamespace, broker.ServiceAccountName(res.ClusterID))
	return nil
}

type leaveOptions struct {
	memberContext, clusterID, brokerNamespace string
	keepSecret                                bool
}

func newLeaveCmd(g *globals) *cobra.Command {
	o := &leaveOptions{}
	cmd := &cobra.Command{
		Use:   "leave",
		Short: "Remove a member cluster from the broker",
		Long: `Remove the member cluster of --context (or --member-context, or the one
--cluster-id names) from the broker of --broker-context: delete its
declaration, which deletes its broker identity, then its namespace on the
broker (its export records, EndpointSlices and Lease) and its ClusterSetIP
claims, and the Secret mcsd-system/mcsd-broker in the member unless
--keep-secret. It waits until nothing of the member is left on the broker,
and otherwise fails naming what is (an object held by a finalizer, say).
Other members stop importing its services. Delete the member's
ServiceExports or stop its mcsd first: its exporter cannot write any more.`,
		Example: `  kubectl mcs leave --broker-context BROKER --context MEMBER
  kubectl mcs leave --broker-context BROKER --cluster-id east   # a member that is gone`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.run(cmd.Context(), g)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.memberContext, "member-context", "", "kubeconfig context of the member cluster (default --context)")
	f.StringVar(&o.clusterID, "cluster-id", "", "the member's cluster ID; with it, the member cluster is not contacted")
	f.StringVar(&o.brokerNamespace, "broker-namespace", broker.DefaultNamespace, "the broker namespace")
	f.BoolVar(&o.keepSecret, "keep-secret", false, "keep the Secret mcsd-system/mcsd-broker in the member")
	return cmd
}

func (o *leaveOptions) run(ctx context.Context, g *globals) error {
	if g.brokerContext == "" {
		return errors.New("--broker-context is required: the broker's administrator removes the member")
	}
	brokerCfg, err := g.brokerConfig()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	id := o.clusterID
	var memberKube kubernetes.Interface
	if id == "" || o.memberContext != "" {
		memberCfg, err := g.memberConfig(o.memberContext)
		if err != nil {
			return err
		}
		member, err := status.NewClients(memberCfg)
		if err != nil {
			return err
		}
		if id, _, err = membership.ResolveClusterID(ctx, member.Kube, member.Dynamic, id); err != nil {
			return err
		}
		if !o.keepSecret {
			memberKube = member.Kube
		}
	}
	progress := func(format string, args ...any) {
		fmt.Fprintf(g.streams.ErrOut, "leave: "+format+"\n", args...)
	}
	if err := membership.Leave(ctx, brokerCfg, memberKube, o.brokerNamespace, id, progress); err != nil {
		return err
	}
	fmt.Fprintf(g.streams.Out, "cluster %s left the broker\n", id)
	return nil
}
