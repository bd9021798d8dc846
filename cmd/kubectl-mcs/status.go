package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/client-go/kubernetes"

	"github.com/mcsd-io/mcsd/broker"
	"github.com/mcsd-io/mcsd/kubectlmcs/membership"
	"github.com/mcsd-io/mcsd/kubectlmcs/status"
	"github.com/mcsd-io/mcsd/liveness"
)

// brokerFlags say how to reach the broker for reading.
type brokerFlags struct {
	namespace string
}

func (b *brokerFlags) add(cmd *cobra.Command) {
	cmd.Flags().StringVar(&b.namespace, "broker-namespace", "", "the broker namespace (default: the namespace of the member's broker kubeconfig, else "+broker.DefaultNamespace+")")
}

// snapshot reads the broker: as its administrator with --broker-context,
// else with the member's own broker credentials.
func (b *brokerFlags) snapshot(ctx context.Context, g *globals) (*status.Snapshot, error) {
	cfg, err := g.brokerConfig()
	if err != nil {
		return nil, err
	}
	ns := b.namespace
	if cfg == nil {
		member, err := g.memberConfig("")
		if err != nil {
			return nil, err
		}
		kube, err := kubernetes.NewForConfig(member)
		if err != nil {
			return nil, err
		}
		var secretNS string
		if cfg, secretNS, err = membership.BrokerConfigIn(ctx, kube, g.mcsdNamespace()); err != nil {
			return nil, fmt.Errorf("%w; or give --broker-context", err)
		}
		cfg = tune(cfg)
		if ns == "" {
			ns = secretNS
		}
	}
	if ns == "" {
		ns = broker.DefaultNamespace
	}
	c, err := status.NewClients(cfg)
	if err != nil {
		return nil, err
	}
	return status.Read(ctx, c.Kube, c.MCS, ns)
}

type statusOptions struct {
	out           outputFlag
	broker        brokerFlags
	mcsdNamespace string
	deprecatedTTL time.Duration
}

// clustersetStatus is status's -o json/yaml document.
type clustersetStatus struct {
	BrokerNamespace string `json:"brokerNamespace"`
	// Liveness is the member's liveness ConfigMap the clusters' states
	// come from, "" when there is none.
	Liveness string `json:"liveness,omitempty"`
	// BrokerReachable is whether the broker answers the member, as that
	// ConfigMap says.
	BrokerReachable *bool            `json:"brokerReachable,omitempty"`
	Clusters        []status.Cluster `json:"clusters"`
	// Note says what status cannot show.
	Note string `json:"note,omitempty"`
}

func newStatusCmd(g *globals) *cobra.Command {
	o := &statusOptions{}
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show the clusters of the clusterset as the broker and the member know them",
		Long: `Show every cluster the broker knows of: whether it is Live or Gone as the
member of --context publishes it (its liveness ConfigMap, which that
member's nodes act on: a Gone cluster's endpoints are not served; Unknown
when the member has not judged it), the age of its Lease on this machine's
clock, its export records, how many of its exports are in conflict (merged
as mcsd merges them), its declared pod CIDRs, its ClusterSetIP blocks and
the version of the mcsd that renews its Lease.

The broker is read with --broker-context, else with the member's own broker
credentials (the Secret mcsd-broker in --namespace of --context).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.out.validate(); err != nil {
				return err
			}
			if o.mcsdNamespace == "" {
				o.mcsdNamespace = g.mcsdNamespace()
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), time.Minute)
			defer cancel()
			s, err := o.broker.snapshot(ctx, g)
			if err != nil {
				return err
			}
			doc := clustersetStatus{BrokerNamespace: s.Namespace}
			live := o.liveness(ctx, g, &doc)
			doc.Clusters = s.Clusters(live)
			if done, err := o.out.print(g.streams.Out, doc); done {
				return err
			}
			if err := printClusters(g, doc); err != nil {
				return err
			}
			for _, err := range s.Broken {
				fmt.Fprintln(g.streams.ErrOut, "warning:", err)
			}
			return nil
		},
	}
	o.out.add(cmd)
	o.broker.add(cmd)
	cmd.Flags().StringVar(&o.mcsdNamespace, "mcsd-namespace", "", "the namespace mcsd runs in, in the member")
	_ = cmd.Flags().MarkDeprecated("mcsd-namespace", "use --namespace")
	cmd.Flags().DurationVar(&o.deprecatedTTL, "cluster-ttl", liveness.DefaultTTL, "ignored")
	_ = cmd.Flags().MarkDeprecated("cluster-ttl", "a cluster's state is the one the member publishes, judged with its mcsd's --cluster-ttl")
	cmd.AddCommand(newStatusServiceCmd(g))
	return cmd
}

// liveness reads the member's liveness ConfigMap into doc, and returns it
// (nil, with a note, when there is none or it cannot be read).
func (o *statusOptions) liveness(ctx context.Context, g *globals, doc *clustersetStatus) *liveness.State {
	name := o.mcsdNamespace + "/" + liveness.ConfigMapName
	cfg, err := g.memberConfig("")
	var kube kubernetes.Interface
	if err == nil {
		kube, err = kubernetes.NewForConfig(cfg)
	}
	var live *liveness.State
	if err == nil {
		live, err = status.ReadLiveness(ctx, kube, o.mcsdNamespace)
	}
	switch {
	case err != nil:
		doc.Note = fmt.Sprintf("the member's liveness (%s) could not be read: %v; every state is %s", name, err, liveness.Unknown)
	case live == nil:
		doc.Note = fmt.Sprintf("the member has no liveness ConfigMap %s (no importer runs there); every state is %s", name, liveness.Unknown)
	default:
		doc.Liveness = name
		doc.BrokerReachable = &live.BrokerReachable
	}
	return live
}

// printClusters prints the clusters as a table, and what the states come
// from.
func printClusters(g *globals, doc clustersetStatus) error {
	w := newTable(g.streams.Out)
	fmt.Fprintln(w, "CLUSTER\tSTATE\tLEASE AGE\tEXPORTS\tCONFLICTS\tPOD CIDRS\tCLUSTERSETIP BLOCKS\tMCSD")
	for _, c := range doc.Clusters {
		age := "-"
		if c.RenewTime != nil {
			age = duration.HumanDuration(c.LeaseAge)
			if c.LeaseAge < 0 {
				age = "-" + duration.HumanDuration(-c.LeaseAge)
			}
		}
		exports := fmt.Sprint(c.Exports)
		if c.Invalid > 0 {
			exports += fmt.Sprintf(" (+%d invalid)", c.Invalid)
		}
		cidrs := strings.Join(c.PodCIDRs, ",")
		if !c.Declared {
			cidrs = "<undeclared>"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", c.ID, c.State, age, exports, c.Conflicts, cidrs, orDash(strings.Join(c.Blocks, ",")), orDash(c.Version))
	}
	if err := w.Flush(); err != nil {
		return err
	}
	switch {
	case doc.Note != "":
		fmt.Fprintln(g.streams.ErrOut, "warning:", doc.Note)
	case doc.BrokerReachable != nil && !*doc.BrokerReachable:
		fmt.Fprintf(g.streams.Out, "\nStates as %s says; the broker does not answer the member: it serves the last known state.\n", doc.Liveness)
	default:
		fmt.Fprintf(g.streams.Out, "\nStates as %s says.\n", doc.Liveness)
	}
	return nil
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// serviceOptions are status svc's; local skips the broker.
type serviceOptions struct {
	out    outputFlag
	broker brokerFlags
	local  bool
}

func newStatusServiceCmd(g *globals) *cobra.Command {
	o := &serviceOptions{}
	cmd := &cobra.Command{
		Use:     "svc NAMESPACE/NAME",
		Aliases: []string{"service"},
		Short:   "Show one multi-cluster service: its exporters, ServiceImport and endpoints",
		Long: `Show the service NAMESPACE/NAME: which clusters export it and their
conflicts (from the broker), and in the member of --context its ServiceImport
(type, ClusterSetIPs, ports, clusters, conditions) and the endpoints it
imports from each cluster (its MCS EndpointSlices).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.out.validate(); err != nil {
				return err
			}
			ns, name, ok := strings.Cut(args[0], "/")
			if !ok || ns == "" || name == "" {
				return fmt.Errorf("%q is not NAMESPACE/NAME", args[0])
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), time.Minute)
			defer cancel()
			var snap *status.Snapshot
			if !o.local {
				s, err := o.broker.snapshot(ctx, g)
				if err != nil {
					return fmt.Errorf("reading the broker (--local to skip it): %w", err)
				}
				snap = s
			}
			cfg, err := g.memberConfig("")
			if err != nil {
				return err
			}
			c, err := status.NewClients(cfg)
			if err != nil {
				return err
			}
			svc, err := status.ReadService(ctx, c.Kube, c.MCS, snap, ns, name)
			if err != nil {
				return err
			}
			if done, err := o.out.print(g.streams.Out, svc); done {
				return err
			}
			return printService(g, svc, snap != nil)
		},
	}
	o.out.add(cmd)
	o.broker.add(cmd)
	cmd.Flags().BoolVar(&o.local, "local", false, "read the member only, not the broker")
	return cmd
}

func printService(g *globals, svc *status.Service, broker bool) error {
	w := newTable(g.streams.Out)
	fmt.Fprintf(w, "Service:\t%s/%s\n", svc.Namespace, svc.Name)
	if imp := svc.Import; imp != nil {
		fmt.Fprintf(w, "Type:\t%s\n", imp.Type)
		fmt.Fprintf(w, "ClusterSetIPs:\t%s\n", orDash(strings.Join(imp.IPs, ",")))
		fmt.Fprintf(w, "Ports:\t%s\n", orDash(strings.Join(imp.Ports, ",")))
		fmt.Fprintf(w, "Clusters:\t%s\n", orDash(strings.Join(imp.Clusters, ",")))
	} else {
		fmt.Fprintf(w, "ServiceImport:\tnone in this cluster\n")
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if imp := svc.Import; imp != nil && len(imp.Conditions) > 0 {
		fmt.Fprintln(g.streams.Out, "\nConditions:")
		w = newTable(g.streams.Out)
		fmt.Fprintln(w, "  TYPE\tSTATUS\tREASON\tMESSAGE")
		for _, c := range imp.Conditions {
			fmt.Fprintf(w, "  %s\t%s\t%s\t%s\n", c.Type, c.Status, c.Reason, c.Message)
		}
		if err := w.Flush(); err != nil {
			return err
		}
	}
	if broker {
		fmt.Fprintln(g.streams.Out, "\nExported by (broker):")
		w = newTable(g.streams.Out)
		fmt.Fprintln(w, "  CLUSTER\tPRECEDENCE\tIN SERVICE\tVIPS\tCONFLICT")
		for _, e := range svc.Exporters {
			fmt.Fprintf(w, "  %s\t%s\t%s\t%s\t%s\n", e.Cluster, yesNo(e.Precedence), yesNo(e.InService), orDash(strings.Join(e.VIPs, ",")), orDash(e.Conflict))
		}
		if len(svc.Exporters) == 0 {
			fmt.Fprintln(w, "  (no cluster exports it)")
		}
		if err := w.Flush(); err != nil {
			return err
		}
	}
	fmt.Fprintln(g.streams.Out, "\nEndpoints (this cluster's MCS EndpointSlices):")
	w = newTable(g.streams.Out)
	fmt.Fprintln(w, "  CLUSTER\tSLICES\tREADY\tNOT READY\tADDRESSES")
	for _, e := range svc.Endpoints {
		fmt.Fprintf(w, "  %s\t%d\t%d\t%d\t%s\n", e.Cluster, e.Slices, e.Ready, e.NotReady, orDash(strings.Join(e.Addrs, ",")))
	}
	if len(svc.Endpoints) == 0 {
		fmt.Fprintln(w, "  (none)")
	}
	return w.Flush()
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
