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
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/mcsd-io/mcsd/broker"
	"github.com/mcsd-io/mcsd/kubectlmcs/dnsconfig"
	"github.com/mcsd-io/mcsd/kubectlmcs/install"
	"github.com/mcsd-io/mcsd/kubectlmcs/membership"
	"github.com/mcsd-io/mcsd/kubectlmcs/status"
)

type joinOptions struct {
	memberContext, clusterID, podCIDRs string
	brokerServer, brokerNamespace      string
	// kubeconfigFile, when set, is where the member's broker kubeconfig
	// is written too.
	kubeconfigFile string
	// output is -o: yaml or json prints what join applies; another value
	// is the file of kubeconfigFile, as it was before.
	output   string
	dryRun   string
	dns      dnsFlag
	noSecret bool
	// install applies mcsd in the member; image is its image.
	install bool
	image   string
}

func newJoinCmd(g *globals) *cobra.Command {
	o := &joinOptions{}
	cmd := &cobra.Command{
		Use:   "join",
		Short: "Join a member cluster to the broker",
		Long: `Join the member cluster of --context (or --member-context) to the broker of
--broker-context. First, unless --install=false, install mcsd in it: the
CRDs of manifests/crds where absent, then manifests/mcsd for this member
(its cluster ID, pod CIDRs, IP families from its ServiceCIDR "kubernetes",
the broker's clusterset ranges, --image), applied server-side with the
field manager kubectl-mcs. Then declare its pod CIDRs on the broker (ConfigMap
mcsd-member-<cluster-id>), create its broker identity (ServiceAccount
cluster-<cluster-id>, RoleBinding to the Role mcsd-member, a token; owned by
the declaration), raise the broker's quota by one member budget, and store a
kubeconfig of that identity in the member as the Secret
mcsd-system/mcsd-broker, which mcsd reads (--broker-secret).

Then, with --dns=auto (the default) and mcsd's Service mcsd-system/mcsd-dns
in the member, it makes the member's DNS forward clusterset.local and the
reverse zones of the broker's clusterset ranges to mcsd-dns: the server
block of manifests/mcsd/coredns-snippet.yaml in CoreDNS's Corefile
(kube-system/coredns), or in kube-system/coredns-custom where the Corefile
imports server blocks from it (k3s, AKS); with NodeLocal DNSCache
(kube-system/node-local-dns), a block forwarding clusterset.local to the
cluster DNS as its cluster domain does. Where the platform reconciles the
Corefile (label addonmanager.kubernetes.io/mode=Reconcile) or the DNS is
kube-dns, it prints the exact change and fails: make it, then run join
again with --dns=skip. Before mcsd is installed, join leaves the DNS: run it
again afterwards. Where it finds no cluster DNS it knows, it warns and says
what to forward.

The cluster ID is --cluster-id, else the member's ClusterProperty
cluster.clusterset.k8s.io, else the UID of its kube-system namespace: what
mcsd resolves itself. Joining again replaces the pod CIDRs, and changes
nothing that is as it should be: join twice, and the second changes no
object. --dry-run=client -o yaml prints what join would apply (the Secret,
with the member's token if it has joined before, the CRDs the member lacks
and mcsd's objects, and the DNS ConfigMaps once mcsd's Service exists) and
changes nothing. --pod-cidrs defaults to the nodes' spec.podCIDRs.`,
		Example: `  kubectl mcs join --broker-context BROKER --context MEMBER \
      --pod-cidrs 10.244.0.0/16,fd00:10:244::/56 --broker-server https://broker.example.com:6443
  kubectl mcs join --broker-context BROKER --context MEMBER --pod-cidrs 10.244.0.0/16 --dry-run=client -o yaml`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.run(cmd.Context(), g)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.memberContext, "member-context", "", "kubeconfig context of the member cluster (default --context)")
	f.StringVar(&o.clusterID, "cluster-id", "", "the member's cluster ID (default: its ClusterProperty cluster.clusterset.k8s.io, else its kube-system UID)")
	f.StringVar(&o.podCIDRs, "pod-cidrs", "", "the member's pod CIDRs, comma-separated (default: its nodes' spec.podCIDRs): the broker refuses its endpoints outside them")
	f.StringVar(&o.brokerServer, "broker-server", "", "the broker API server's URL as the member's nodes reach it (default: the server of --broker-context)")
	f.StringVar(&o.brokerNamespace, "broker-namespace", broker.DefaultNamespace, "the broker namespace")
	f.StringVar(&o.kubeconfigFile, "broker-kubeconfig-file", "", "also write the member's broker kubeconfig to this file")
	f.StringVarP(&o.output, "output", "o", "", "print what join applies: yaml or json (another value is a file, as --broker-kubeconfig-file, which replaces it)")
	f.StringVar(&o.dryRun, "dry-run", "none", "client: print what join would apply (with -o yaml or json) and change nothing")
	f.Lookup("dry-run").NoOptDefVal = "client"
	f.BoolVar(&o.noSecret, "no-secret", false, "do not write the Secret in the member")
	f.BoolVar(&o.install, "install", true, "install mcsd in the member (the CRDs where absent, then manifests/mcsd for this member); false leaves it to your own tooling")
	f.StringVar(&o.image, "image", "", "mcsd's image for --install (default "+install.ShippedImage+" tagged with this kubectl-mcs's version)")
	o.dns.add(cmd, "whether join configures the member's DNS for clusterset.local")
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

// validate checks the flags of join, taking an --output that is not a
// format as the file it used to be.
func (o *joinOptions) validate(g *globals) error {
	if g.brokerContext == "" {
		return errors.New("--broker-context is required: the broker's administrator declares the member")
	}
	if o.dryRun != "none" && o.dryRun != "client" {
		return fmt.Errorf("--dry-run %q: want none or client", o.dryRun)
	}
	if o.output != "" && o.output != "yaml" && o.output != "json" {
		if o.kubeconfigFile != "" {
			return fmt.Errorf("--output %q: want yaml or json", o.output)
		}
		fmt.Fprintf(g.streams.ErrOut, "warning: --output FILE is deprecated; use --broker-kubeconfig-file %s\n", o.output)
		o.kubeconfigFile, o.output = o.output, ""
	}
	return o.dns.validate()
}

func (o *joinOptions) run(ctx context.Context, g *globals) error {
	if err := o.validate(g); err != nil {
		return err
	}
	dry := o.dryRun == "client"
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
	member, brk, err := clientsOf(memberCfg, brokerCfg)
	if err != nil {
		return err
	}
	cidrs, err := o.memberPodCIDRs(ctx, member)
	if err != nil {
		return err
	}
	// mcsd first, so that the Secret finds its namespace and the DNS its
	// Service.
	var objs []runtime.Object
	if o.install {
		if objs, err = o.installMCSD(ctx, memberCfg, brk, cidrs, dry, progress); err != nil {
			return err
		}
	}
	opts := membership.Options{
		BrokerNamespace: o.brokerNamespace,
		ClusterID:       o.clusterID,
		PodCIDRs:        cidrs,
		BrokerServer:    o.brokerServer,
		NoSecret:        o.noSecret,
		Progress:        progress,
	}
	var res membership.Result
	if dry {
		res, err = membership.Preview(ctx, brokerCfg, memberCfg, opts)
	} else {
		res, err = membership.Join(ctx, brokerCfg, memberCfg, opts)
	}
	if err != nil {
		return err
	}
	if o.kubeconfigFile != "" && !dry {
		if err := os.WriteFile(o.kubeconfigFile, res.Kubeconfig, 0o600); err != nil {
			return err
		}
		progress("wrote %s", o.kubeconfigFile)
	}
	if res.Secret != "" {
		objs = append(objs, membership.Secret(res.Kubeconfig))
	}
	var plan dnsconfig.Plan
	if o.dns.mode == dnsAuto {
		if plan, err = memberDNS(ctx, member, brk, o.brokerNamespace, false, dry, progress); err != nil {
			return err
		}
		for _, c := range plan.Changes {
			if c.After != nil {
				objs = append(objs, c.After)
			}
		}
	}
	if o.output != "" {
		if err := printObjects(g.streams.Out, o.output, objs); err != nil {
			return err
		}
	}
	if dry {
		// What to make by hand goes with the rest, not as a failure.
		for _, c := range plan.Manual() {
			fmt.Fprintf(g.streams.ErrOut, "warning: by hand: %s: %s\n", c.Manual, c.What)
		}
		return nil
	}
	if o.output == "" {
		fmt.Fprintf(g.streams.Out, "cluster %s joined the broker as %s/%s\n", res.ClusterID, o.brokerNamespace, broker.ServiceAccountName(res.ClusterID))
	}
	return manualDNS(g.streams.Out, g.streams.ErrOut, plan, "join")
}

// clientsOf are clients of the member and the broker.
func clientsOf(member, brokerCfg *rest.Config) (kubernetes.Interface, kubernetes.Interface, error) {
	m, err := kubernetes.NewForConfig(member)
	if err != nil {
		return nil, nil, err
	}
	b, err := kubernetes.NewForConfig(brokerCfg)
	return m, b, err
}

type leaveOptions struct {
	memberContext, clusterID, brokerNamespace string
	keepSecret                                bool
	keepMCSD                                  bool
	dns                                       dnsFlag
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
ServiceExports or stop its mcsd first: its exporter cannot write any more.

With --dns=auto (the default) and the member contacted, it takes back what
join changed in the member's DNS: the clusterset.local server block of
CoreDNS's and NodeLocal DNSCache's Corefiles, mcsd's key of coredns-custom;
where the platform owns the DNS, it prints the change to make by hand and
fails. Last, unless --keep-mcsd, it deletes the objects join installed in
the member (those the field manager kubectl-mcs applied), its namespace
last, and waits until they are gone; it keeps the CRDs, whose deletion
would delete the cluster's ServiceExports and ServiceImports and, on a
cluster that is also the broker, every member's records.`,
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
	f.BoolVar(&o.keepSecret, "keep-secret", false, "keep the Secret mcsd-system/mcsd-broker in the member (with --keep-mcsd: removing mcsd removes its namespace)")
	f.BoolVar(&o.keepMCSD, "keep-mcsd", false, "keep the mcsd objects join installed in the member")
	o.dns.add(cmd, "whether leave takes back join's change of the member's DNS")
	return cmd
}

func (o *leaveOptions) run(ctx context.Context, g *globals) error {
	if g.brokerContext == "" {
		return errors.New("--broker-context is required: the broker's administrator removes the member")
	}
	if err := o.dns.validate(); err != nil {
		return err
	}
	if o.keepSecret && !o.keepMCSD {
		return errors.New("--keep-secret: the Secret is in mcsd's namespace, which leave removes with mcsd; give --keep-mcsd too")
	}
	brokerCfg, err := g.brokerConfig()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	id := o.clusterID
	var memberKube, contacted kubernetes.Interface
	var memberCfg *rest.Config
	if id == "" || o.memberContext != "" {
		if memberCfg, err = g.memberConfig(o.memberContext); err != nil {
			return err
		}
		member, err := status.NewClients(memberCfg)
		if err != nil {
			return err
		}
		if id, _, err = membership.ResolveClusterID(ctx, member.Kube, member.Dynamic, id); err != nil {
			return err
		}
		contacted = member.Kube
		if !o.keepSecret {
			memberKube = member.Kube
		}
	}
	progress := func(format string, args ...any) {
		fmt.Fprintf(g.streams.ErrOut, "leave: "+format+"\n", args...)
	}
	var plan dnsconfig.Plan
	if o.dns.mode == dnsAuto && contacted != nil {
		// Planned before the member leaves: the broker's ranges name the
		// reverse zones.
		brk, err := kubernetes.NewForConfig(brokerCfg)
		if err != nil {
			return err
		}
		if plan, err = memberDNS(ctx, contacted, brk, o.brokerNamespace, true, true, progress); err != nil {
			return err
		}
	}
	if err := membership.Leave(ctx, brokerCfg, memberKube, o.brokerNamespace, id, progress); err != nil {
		return err
	}
	if contacted != nil {
		applied, err := dnsconfig.Apply(ctx, contacted, plan)
		for _, what := range applied {
			progress("DNS: did %s", what)
		}
		if err != nil {
			return err
		}
		if !o.keepMCSD {
			if err := uninstallMCSD(ctx, memberCfg, progress); err != nil {
				return err
			}
		}
	}
	fmt.Fprintf(g.streams.Out, "cluster %s left the broker\n", id)
	return manualDNS(g.streams.Out, g.streams.ErrOut, plan, "leave")
}
