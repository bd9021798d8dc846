package main

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/mcsd-io/mcsd/broker"
	"github.com/mcsd-io/mcsd/kubectlmcs/dnsconfig"
	"github.com/mcsd-io/mcsd/kubectlmcs/install"
	"github.com/mcsd-io/mcsd/kubectlmcs/membership"
	"github.com/mcsd-io/mcsd/kubectlmcs/readiness"
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
	// install applies mcsd in the member; image is its image, valueFiles
	// and sets the chart's values (--values, --set).
	install    bool
	image      string
	valueFiles []string
	sets       []string
	// wait waits until mcsd runs and the cluster DNS answers, within
	// timeout, restarting CoreDNS as restartCoreDNS says.
	wait           bool
	timeout        time.Duration
	restartCoreDNS string
}

func newJoinCmd(g *globals) *cobra.Command {
	o := &joinOptions{}
	cmd := &cobra.Command{
		Use:   "join",
		Short: "Join a member cluster to the broker, install mcsd in it and wait until it works",
		Long: `Join the member cluster of --context (or --member-context) to the broker of
--broker-context, and wait until it works.

First, unless --install=false, install mcsd in it, in --namespace
(mcsd-system by default): the CRDs of manifests/crds where absent, then the
chart charts/mcsd rendered for this member (its cluster ID, pod CIDRs, IP
families from its ServiceCIDR "kubernetes", the broker's clusterset ranges,
--image, and your --values and --set, as helm install takes them: the
objects helm install and kubectl apply -k manifests/mcsd make), applied
server-side with the field manager kubectl-mcs. Without --image (or the
values image.repository and image.tag) the image is ghcr.io/mcsd-io/mcsd
tagged with this kubectl-mcs's version, which only a release publishes:
join refuses it, before writing anything, where this kubectl-mcs is a
development build.

Then declare its pod CIDRs on the broker (ConfigMap mcsd-member-<cluster-id>),
create its broker identity (ServiceAccount cluster-<cluster-id>, RoleBinding
to the Role mcsd-member, a token; owned by the declaration), raise the
broker's quota by one member budget, and store a kubeconfig of that identity
in the member as the Secret mcsd-broker of mcsd's namespace, which mcsd
reads (--broker-secret).

Then, with --dns=auto (the default), it makes the member's DNS forward
clusterset.local and the reverse zones of the broker's clusterset ranges to
mcsd's Service mcsd-dns (in --namespace; with --wait, join waits for it to
exist, as when Helm or kustomize installs mcsd at the same time): the server
block of manifests/mcsd/coredns-snippet.yaml in CoreDNS's Corefile
(kube-system/coredns), or in kube-system/coredns-custom where the Corefile
imports server blocks from it (k3s, AKS); with NodeLocal DNSCache
(kube-system/node-local-dns), a block forwarding clusterset.local to the
cluster DNS as its cluster domain does. Where the platform reconciles the
Corefile (label addonmanager.kubernetes.io/mode=Reconcile) or the DNS is
kube-dns, it prints the exact change and fails: make it, then run join
again with --dns=skip. Where it finds no cluster DNS it knows, it warns and
says what to forward.

Last, with --wait (the default), it waits, one line per stage, until the
node agents' DaemonSet and the controller's Deployment have rolled out and
every pod of the cluster DNS (Service kube-system/kube-dns) answers for
clusterset.local, each asked directly through the API server's port-forward
(the operator's machine need not reach pod IPs). A CoreDNS pod reads the
changed Corefile once the kubelet has updated its ConfigMap volume and its
reload plugin has seen it: a minute or two. --restart-coredns says whether
join restarts CoreDNS instead (its Deployment, as kubectl rollout restart
does): auto (the default) when its pods do not answer 5s after mcsd has
rolled out, always, or never. --timeout bounds join, its waiting included;
on timeout it says which stage it waited for and what it saw.
--wait=false returns once the objects are written.

The cluster ID is --cluster-id, else the member's ClusterProperty
cluster.clusterset.k8s.io, else the UID of its kube-system namespace: what
mcsd resolves itself. Joining again replaces the pod CIDRs, and changes
nothing that is as it should be: join twice, and the second changes no
object. --dry-run=client -o yaml prints what join would apply (the Secret,
with the member's token if it has joined before, the CRDs the member lacks
and mcsd's objects, and the DNS ConfigMaps once mcsd's Service exists) and
changes nothing. --pod-cidrs defaults to the nodes' spec.podCIDRs.

--install=false leaves mcsd to your own tooling (helm install, kubectl
apply -k): join declares the member, writes the Secret in --namespace,
configures the DNS once mcsd-dns exists there, and waits as above.`,
		Example: `  kubectl mcs join --broker-context BROKER --context MEMBER \
      --pod-cidrs 10.244.0.0/16,fd00:10:244::/56 --broker-server https://broker.example.com:6443 \
      --image registry.example.com/mcsd:v1
  kubectl mcs join --broker-context BROKER --context MEMBER --image registry.example.com/mcsd:v1 \
      --set logVerbosity=4 --values my-values.yaml
  # mcsd installed by Helm in namespace mcs:
  kubectl mcs join --broker-context BROKER --context MEMBER --install=false --namespace mcs
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
	f.BoolVar(&o.install, "install", true, "install mcsd in the member (the CRDs where absent, then the chart charts/mcsd for this member); false leaves it to your own tooling (helm install, kubectl apply -k)")
	f.StringVar(&o.image, "image", "", "mcsd's image for --install (default "+install.ShippedImage+" tagged with this kubectl-mcs's version: a release's only)")
	f.StringArrayVarP(&o.valueFiles, "values", "f", nil, "for --install: a YAML file of the chart's values, as helm install -f takes it (repeatable)")
	f.StringArrayVar(&o.sets, "set", nil, "for --install: chart values, as helm install --set takes them (key=value,key2=value2; repeatable)")
	f.BoolVar(&o.wait, "wait", true, "wait until mcsd has rolled out and every cluster DNS pod answers for clusterset.local")
	f.DurationVar(&o.timeout, "timeout", 5*time.Minute, "how long join may take, its waiting included")
	f.StringVar(&o.restartCoreDNS, "restart-coredns", restartAuto, "with --wait, whether to restart CoreDNS (kubectl rollout restart of its Deployment) so that its pods read the changed Corefile now: "+
		restartAuto+" (when its pods do not answer for clusterset.local "+autoRestartAfter.String()+" after mcsd has rolled out; a reload takes a minute or two), "+restartAlways+" or "+restartNever)
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
	switch o.restartCoreDNS {
	case restartAuto, restartAlways, restartNever:
	default:
		return fmt.Errorf("--restart-coredns %q: want %s, %s or %s", o.restartCoreDNS, restartAuto, restartAlways, restartNever)
	}
	if o.timeout <= 0 {
		return fmt.Errorf("--timeout %v: want a duration above zero", o.timeout)
	}
	if !o.install && (o.image != "" || len(o.valueFiles) > 0 || len(o.sets) > 0) {
		return errors.New("--image, --values and --set are for --install: with --install=false, give them to your own tooling")
	}
	return o.dns.validate()
}

func (o *joinOptions) run(ctx context.Context, g *globals) error {
	began := time.Now()
	if err := o.validate(g); err != nil {
		return err
	}
	dry := o.dryRun == "client"
	values, err := install.ParseValues(o.valueFiles, o.sets)
	if err != nil {
		return err
	}
	brokerCfg, err := g.brokerConfig()
	if err != nil {
		return err
	}
	memberCfg, err := g.memberConfig(o.memberContext)
	if err != nil {
		return err
	}
	namespace := g.mcsdNamespace()
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	progress := func(format string, args ...any) {
		fmt.Fprintf(g.streams.ErrOut, "join: "+format+"\n", args...)
	}
	// done says a stage is reached, with how long after join began.
	done := func(format string, args ...any) {
		progress(format+" (%s)", append(args, since(began))...)
	}
	member, brk, err := clientsOf(memberCfg, brokerCfg)
	if err != nil {
		return err
	}
	cidrs, err := o.memberPodCIDRs(ctx, member, values)
	if err != nil {
		return err
	}
	// Everything is rendered, and the image checked, before anything is
	// written.
	var rendered []*unstructured.Unstructured
	if o.install {
		if rendered, err = o.mcsdObjects(ctx, memberCfg, brk, cidrs, namespace, values, progress); err != nil {
			return err
		}
	}
	// mcsd first, so that the Secret finds its namespace and the DNS its
	// Service.
	var objs []runtime.Object
	if o.install {
		if objs, err = o.installMCSD(ctx, memberCfg, rendered, dry, progress); err != nil {
			return err
		}
		if !dry {
			done("mcsd installed in %s", namespace)
		}
	}
	opts := membership.Options{
		BrokerNamespace: o.brokerNamespace,
		ClusterID:       o.clusterIDOr(values),
		PodCIDRs:        cidrs,
		BrokerServer:    o.brokerServer,
		NoSecret:        o.noSecret,
		Namespace:       namespace,
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
	if !dry {
		done("member %s registered on the broker", res.ClusterID)
	}
	if o.kubeconfigFile != "" && !dry {
		if err := os.WriteFile(o.kubeconfigFile, res.Kubeconfig, 0o600); err != nil {
			return err
		}
		progress("wrote %s", o.kubeconfigFile)
	}
	if res.Secret != "" {
		objs = append(objs, membership.Secret(namespace, res.Kubeconfig))
	}
	w := o.waiter(g, memberCfg, member, namespace, began)
	var plan dnsconfig.Plan
	if o.dns.mode == dnsAuto {
		if o.wait && !dry {
			// Helm or kustomize may be installing mcsd while join runs.
			if err := o.timedOut(w.dnsService(ctx)); err != nil {
				return err
			}
		}
		if plan, err = memberDNS(ctx, member, brk, o.brokerNamespace, namespace, false, dry, progress); err != nil {
			return err
		}
		for _, c := range plan.Changes {
			if c.After != nil {
				objs = append(objs, c.After)
			}
		}
		if !dry && clusterDNSReady(plan) {
			done("CoreDNS configured to forward clusterset.local to %s/%s", namespace, mcsdDNSService)
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
	if o.wait {
		if err := o.timedOut(w.rollout(ctx)); err != nil {
			return err
		}
		switch {
		case o.dns.mode == dnsAuto && clusterDNSReady(plan):
			if err := o.timedOut(w.clusterDNS(ctx, o.restartCoreDNS)); err != nil {
				return err
			}
		case o.dns.mode == dnsSkip:
			progress("not waiting for the cluster DNS (--dns=skip): configure it to forward clusterset.local to %s/%s", namespace, mcsdDNSService)
		}
	}
	if o.output == "" {
		fmt.Fprintf(g.streams.Out, "cluster %s joined the broker as %s/%s%s\n", res.ClusterID, o.brokerNamespace, broker.ServiceAccountName(res.ClusterID), doneSuffix(o.wait, began))
		fmt.Fprintln(g.streams.Out, exportRulesHint(res.ClusterID+"[,ID...]", o.brokerNamespace))
	}
	return manualDNS(g.streams.Out, g.streams.ErrOut, plan, "join")
}

// timedOut says which flags bound a wait that ended before its stage was
// reached.
func (o *joinOptions) timedOut(err error) error {
	var timeout *readiness.TimeoutError
	if errors.As(err, &timeout) {
		return fmt.Errorf("%w (--timeout %v; --wait=false does not wait)", err, o.timeout)
	}
	return err
}

// clusterDNSReady says whether join has configured CoreDNS by the plan,
// which it then waits for: CoreDNS was found, and nothing is left to do by
// hand.
func clusterDNSReady(plan dnsconfig.Plan) bool {
	found := slices.ContainsFunc(plan.Found, func(f string) bool { return strings.HasPrefix(f, "CoreDNS") })
	return found && len(plan.Manual()) == 0
}

func doneSuffix(waited bool, began time.Time) string {
	if !waited {
		return ""
	}
	return ", and works (" + since(began) + ")"
}

// since is how long ago t was, as join's lines say it.
func since(t time.Time) string { return time.Since(t).Round(100 * time.Millisecond).String() }

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
claims, and the Secret mcsd-broker of mcsd's namespace (--namespace) in the
member unless --keep-secret. It waits until nothing of the member is left on the broker,
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
	f.BoolVar(&o.keepSecret, "keep-secret", false, "keep the Secret mcsd-broker in the member (with --keep-mcsd: removing mcsd removes its namespace)")
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
		if plan, err = memberDNS(ctx, contacted, brk, o.brokerNamespace, g.mcsdNamespace(), true, true, progress); err != nil {
			return err
		}
	}
	if err := membership.Leave(ctx, brokerCfg, memberKube, g.mcsdNamespace(), o.brokerNamespace, id, progress); err != nil {
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
			if err := uninstallMCSD(ctx, memberCfg, g.mcsdNamespace(), progress); err != nil {
				return err
			}
		}
	}
	fmt.Fprintf(g.streams.Out, "cluster %s left the broker\n", id)
	return manualDNS(g.streams.Out, g.streams.ErrOut, plan, "leave")
}
