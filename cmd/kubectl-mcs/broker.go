package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/mcsd-io/mcsd/broker"
	"github.com/mcsd-io/mcsd/internal/record"
	"github.com/mcsd-io/mcsd/kubectlmcs/install"
	"github.com/mcsd-io/mcsd/vipalloc"
)

func newBrokerCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "broker",
		Short: "Set up the broker, move an older one to this layout, and edit its export rules",
	}
	cmd.AddCommand(newBrokerInstallCmd(g), newBrokerMigrateCmd(g), newExportRulesCmd(g))
	return cmd
}

// brokerSettingsOptions are the flags that say the broker's settings.
type brokerSettingsOptions struct {
	namespace        string
	clusterSetCIDRs  string
	blockV4, blockV6 int
	maxMembers       int
	etcdQuota        string
	budget           string
}

func (o *brokerSettingsOptions) add(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&o.namespace, "broker-namespace", broker.DefaultNamespace, "the broker namespace")
	f.StringVar(&o.clusterSetCIDRs, "clusterset-cidrs", "", "the clusterset VIP ranges, one per IP family (default "+vipalloc.DefaultClusterSetCIDRv4.String()+","+vipalloc.DefaultClusterSetCIDRv6.String()+"); as mcsd's --clusterset-cidrs on every member")
	f.IntVar(&o.blockV4, "block-bits-ipv4", 0, fmt.Sprintf("prefix length of each member's IPv4 ClusterSetIP block (default %d)", vipalloc.DefaultBlockBitsV4))
	f.IntVar(&o.blockV6, "block-bits-ipv6", 0, fmt.Sprintf("prefix length of each member's IPv6 ClusterSetIP block (default %d)", vipalloc.DefaultBlockBitsV6))
	f.IntVar(&o.maxMembers, "max-members", 0, fmt.Sprintf("how many members may join (default %d)", broker.DefaultMaxMembers))
	f.StringVar(&o.etcdQuota, "etcd-quota", "", "the broker etcd's --quota-backend-bytes, such as 8Gi (default etcd's, 2Gi): every member's worst case together must fit in half of it")
	f.StringVar(&o.budget, "member-budget", "", "what each member may store, KEY=N,... of "+strings.Join(broker.BudgetKeys(), ", ")+" (default "+budgetString(broker.DefaultMemberBudget)+")")
}

func budgetString(b broker.Budget) string {
	var parts []string
	for _, k := range broker.BudgetKeys() {
		parts = append(parts, fmt.Sprintf("%s=%d", k, b.Get(k)))
	}
	return strings.Join(parts, ",")
}

func (o *brokerSettingsOptions) settings() (broker.Settings, error) {
	s := broker.Settings{Namespace: o.namespace, BlockBitsV4: o.blockV4, BlockBitsV6: o.blockV6, MaxMembers: o.maxMembers}
	if o.clusterSetCIDRs != "" {
		for _, c := range strings.Split(o.clusterSetCIDRs, ",") {
			p, err := netip.ParsePrefix(strings.TrimSpace(c))
			if err != nil {
				return s, fmt.Errorf("--clusterset-cidrs: %w", err)
			}
			if p.Addr().Is4() {
				s.ClusterSetCIDRv4 = p.Masked()
			} else {
				s.ClusterSetCIDRv6 = p.Masked()
			}
		}
	}
	if o.etcdQuota != "" {
		q, err := resource.ParseQuantity(o.etcdQuota)
		if err != nil || q.Value() <= 0 {
			return s, fmt.Errorf("--etcd-quota %q: not a size such as 8Gi", o.etcdQuota)
		}
		s.EtcdQuotaBytes = q.Value()
	}
	if o.budget != "" {
		for _, kv := range strings.Split(o.budget, ",") {
			k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if !ok || err != nil {
				return s, fmt.Errorf("--member-budget %q: want KEY=N,... of %s", o.budget, strings.Join(broker.BudgetKeys(), ", "))
			}
			if err := s.MemberBudget.Set(strings.TrimSpace(k), n); err != nil {
				return s, fmt.Errorf("--member-budget: %w", err)
			}
		}
	}
	return s.WithDefaults(), nil
}

// adminConfig is the broker's administrator's configuration:
// --broker-context, else --context.
func (g *globals) adminConfig() (*rest.Config, error) {
	cfg, err := g.brokerConfig()
	if err == nil && cfg == nil {
		cfg, err = g.memberConfig("")
	}
	return cfg, err
}

type brokerInstallOptions struct {
	brokerSettingsOptions
	skipCRDs bool
	print    bool
}

func newBrokerInstallCmd(g *globals) *cobra.Command {
	o := &brokerInstallOptions{}
	cmd := &cobra.Command{
		Use:   "install",
		Short: "Install the broker: CRDs, namespace, member roles, settings and admission policies",
		Long: `Install the broker in the cluster of --broker-context (else --context), with
broker.Install, and return once its API server enforces the admission
policies that bind each member to its own records. It first prints the worst
case of what the settings let members store (the members' quotas times the
largest objects the policies accept) against the etcd quota, and refuses
settings that do not fit in half of it. --print writes the manifests, with
these settings, instead of applying them.`,
		Example: `  kubectl mcs broker install --broker-context BROKER
  kubectl mcs broker install --max-members 30 --member-budget memberServiceImports=500,memberEndpointSlices=800
  kubectl mcs broker install --clusterset-cidrs 10.250.0.0/16,fd00:250::/48 --block-bits-ipv4 24 --print`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			settings, err := o.settings()
			if err != nil {
				return err
			}
			size := broker.WorstCase(settings)
			if err := size.Print(g.streams.ErrOut); err != nil {
				return err
			}
			if err := size.Fits(); err != nil {
				return err
			}
			if o.print {
				return printBroker(g.streams.Out, settings, !o.skipCRDs)
			}
			cfg, err := g.adminConfig()
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), 5*time.Minute)
			defer cancel()
			if !o.skipCRDs {
				fmt.Fprintf(g.streams.ErrOut, "installing the CRDs at %s\n", cfg.Host)
				if _, err := install.EnsureCRDs(ctx, cfg, true); err != nil {
					return err
				}
			}
			fmt.Fprintf(g.streams.ErrOut, "installing the broker in namespace %s and waiting for its admission policies to be enforced\n", settings.Namespace)
			if err := broker.Install(ctx, cfg, settings); err != nil {
				return err
			}
			fmt.Fprintf(g.streams.Out, "broker installed at %s in namespace %s\n", cfg.Host, settings.Namespace)
			fmt.Fprintln(g.streams.Out, exportRulesHint("ID[,ID...]", settings.Namespace))
			return nil
		},
	}
	o.brokerSettingsOptions.add(cmd)
	f := cmd.Flags()
	f.BoolVar(&o.skipCRDs, "skip-crds", false, "do not install the mcs-api and ClusterProperty CRDs")
	f.BoolVar(&o.print, "print", false, "print the manifests instead of applying them")
	return cmd
}

func newBrokerMigrateCmd(g *globals) *cobra.Command {
	o := &brokerSettingsOptions{}
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "Move a broker of the shared layout to one namespace per member",
		Long: `Move the broker of --broker-context (else --context), where every member wrote
its export records, EndpointSlices and Lease into the broker namespace, to
one namespace per member: install this version (as broker install does,
with the same flags), then move each member's objects into its namespace,
keeping when the broker first stored each record so that no service changes
precedence. Nothing moves when a member has more than its new budget. Then
roll out this version of mcsd to every member at once: until a member runs
it, its writes are refused. Running it again moves what is left.`,
		Example: `  kubectl mcs broker migrate --broker-context BROKER`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			settings, err := o.settings()
			if err != nil {
				return err
			}
			if err := broker.WorstCase(settings).Print(g.streams.ErrOut); err != nil {
				return err
			}
			cfg, err := g.adminConfig()
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), 15*time.Minute)
			defer cancel()
			moved, err := broker.Migrate(ctx, cfg, settings)
			w := newTable(g.streams.Out)
			fmt.Fprintln(w, "MEMBER\tNAMESPACE\tRECORDS\tENDPOINTSLICES\tLEASES")
			for _, id := range slices.Sorted(maps.Keys(moved)) {
				m := moved[id]
				fmt.Fprintf(w, "%s\t%s\t%d\t%d\t%d\n", id, record.MemberNamespace(settings.Namespace, id), m.Records, m.EndpointSlices, m.Leases)
			}
			if ferr := w.Flush(); ferr != nil && err == nil {
				err = ferr
			}
			return err
		},
	}
	o.add(cmd)
	return cmd
}

// printBroker writes the broker's manifests with settings applied, as
// broker.Install would apply them to a broker without members.
func printBroker(w io.Writer, s broker.Settings, withCRDs bool) error {
	var docs [][]byte
	if withCRDs {
		docs = append(docs, install.CRDDocs()...)
	}
	objs, err := broker.Objects(s)
	if err != nil {
		return err
	}
	for _, obj := range objs {
		gvks, _, err := scheme.Scheme.ObjectKinds(obj)
		if err != nil {
			return err
		}
		obj.GetObjectKind().SetGroupVersionKind(gvks[0])
		out, err := yaml.Marshal(obj)
		if err != nil {
			return err
		}
		docs = append(docs, out)
	}
	for i, d := range docs {
		if i > 0 {
			if _, err := io.WriteString(w, "---\n"); err != nil {
				return err
			}
		}
		if _, err := w.Write(d); err != nil {
			return err
		}
	}
	return nil
}
