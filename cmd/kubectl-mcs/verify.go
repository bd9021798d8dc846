package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"

	"github.com/mcsd-io/mcsd/broker"
	"github.com/mcsd-io/mcsd/kubectlmcs/membership"
	"github.com/mcsd-io/mcsd/kubectlmcs/status"
	"github.com/mcsd-io/mcsd/kubectlmcs/verify"
)

type verifyOptions struct {
	out             outputFlag
	contexts        string
	brokerNamespace string
	image           string
	namespace       string
	timeout         time.Duration
	keep            bool
}

func newVerifyCmd(g *globals) *cobra.Command {
	o := &verifyOptions{}
	cmd := &cobra.Command{
		Use:   "verify",
		Short: "Prove that a pod of every member reaches an exported service of every other member",
		Long: `Find the members' kubeconfig contexts: with --broker-context, every context
whose cluster ID (its ClusterProperty cluster.clusterset.k8s.io, else its
kube-system UID, as mcsd resolves it) is a member of the broker, one context
per member, of those of --contexts when given; without it, the contexts of
--contexts. It says which contexts it uses, and why it left the others out.

Deploy a probe in each member (a pod of mcsd's own image,
answering with its cluster ID, behind the Service probe-<cluster-id>,
exported), then, from a pod in every member, resolve every other member's
probe-<cluster-id>.<namespace>.svc.clusterset.local through the cluster DNS
and connect to it, trying again until it answers or --timeout passes (an
export takes a few seconds to be imported). It prints a matrix: a row per
member checking, a column per member checked, PASS with the latency of the
DNS query and of the TCP connection of the attempt that succeeded, or FAIL
with why. Then it deletes the namespace it made in each member and waits
until it is gone. It fails when a check fails.

The pods run mcsd's image (mcsd probe serve|check), found in the mcsd
workloads of each member (in --namespace) unless --image names it: every
member already runs it, so verify pulls nothing new.`,
		Example: `  kubectl mcs verify --broker-context BROKER
  kubectl mcs verify --broker-context BROKER --contexts east,west
  kubectl mcs verify --contexts east,west`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.run(cmd.Context(), g)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.contexts, "contexts", "", "the members' kubeconfig contexts, comma-separated (two at least); with --broker-context, of those the broker's members")
	f.StringVar(&o.brokerNamespace, "broker-namespace", broker.DefaultNamespace, "the broker namespace, with --broker-context")
	f.StringVar(&o.image, "image", "", "the image of the probe pods (default: the image of the mcsd container in each member's --namespace)")
	f.StringVar(&o.namespace, "namespace-name", verify.DefaultNamespace, "the namespace verify creates in every member, and deletes")
	f.DurationVar(&o.timeout, "timeout", 2*time.Minute, "how long each step may take: the probes Ready, each check, the cleanup")
	f.BoolVar(&o.keep, "keep", false, "leave the probes and the namespace, to look at them")
	o.out.add(cmd)
	return cmd
}

func (o *verifyOptions) run(ctx context.Context, g *globals) error {
	if err := o.out.validate(); err != nil {
		return err
	}
	progress := func(format string, args ...any) { fmt.Fprintf(g.streams.ErrOut, "verify: "+format+"\n", args...) }
	var narrow []string
	for _, c := range strings.Split(o.contexts, ",") {
		if c = strings.TrimSpace(c); c != "" {
			narrow = append(narrow, c)
		}
	}
	names := narrow
	if g.brokerContext != "" {
		found, err := o.memberContexts(ctx, g, narrow)
		if err != nil {
			return err
		}
		names = nil
		var used []string
		for _, c := range found.Members {
			names = append(names, c.Context)
			used = append(used, c.String())
		}
		progress("the members' contexts: %s", strings.Join(used, ", "))
		for _, why := range found.Left {
			progress("left out %s", why)
		}
	} else if len(names) < 2 {
		return errors.New("give --broker-context, and verify finds the members among the kubeconfig's contexts, or --contexts with the contexts of two members at least")
	}
	var members []verify.Member
	images := map[string]string{}
	for _, name := range names {
		cfg, err := g.contextConfig(name)
		if err != nil {
			return err
		}
		c, err := status.NewClients(cfg)
		if err != nil {
			return err
		}
		id, _, err := membership.ResolveClusterID(ctx, c.Kube, c.Dynamic, "")
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		members = append(members, verify.Member{Name: name, ID: id, Kube: c.Kube, MCS: c.MCS})
		if o.image == "" {
			if images[name], err = verify.MCSDImage(ctx, c.Kube, g.mcsdNamespace()); err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
		}
	}
	image := o.image
	if image == "" {
		image = images[names[0]]
		for name, img := range images {
			if img != image {
				fmt.Fprintf(g.streams.ErrOut, "warning: %s runs %s, %s %s; the probes run %s (--image chooses)\n", names[0], image, name, img, image)
			}
		}
	}
	cells, err := verify.Run(ctx, members, verify.Options{
		Image: image, Namespace: o.namespace, Timeout: o.timeout, Keep: o.keep,
		Progress: progress,
	})
	if done, perr := o.out.print(g.streams.Out, cells); done {
		if perr != nil {
			return perr
		}
	} else {
		w := newTable(g.streams.Out)
		verify.PrintMatrix(w, names, cells)
		if ferr := w.Flush(); ferr != nil {
			return ferr
		}
	}
	if err != nil {
		return err
	}
	failed := 0
	for _, c := range cells {
		if !c.OK() {
			failed++
		}
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d checks failed", failed, len(cells))
	}
	return nil
}

// memberContexts are the kubeconfig's contexts that reach the broker's
// members, one per member, of narrow when it is not empty: each context's
// cluster ID, read at once from every context, against the members the
// broker of --broker-context knows.
func (o *verifyOptions) memberContexts(ctx context.Context, g *globals, narrow []string) (verify.Choice, error) {
	brokerCfg, err := g.brokerConfig()
	if err != nil {
		return verify.Choice{}, err
	}
	brokerKube, err := kubernetes.NewForConfig(brokerCfg)
	if err != nil {
		return verify.Choice{}, err
	}
	members, err := broker.Members(ctx, brokerKube, o.brokerNamespace)
	if err != nil {
		return verify.Choice{}, err
	}
	raw, err := g.rawKubeconfig()
	if err != nil {
		return verify.Choice{}, err
	}
	candidates := make([]verify.Candidate, 0, len(raw.Contexts))
	for name := range raw.Contexts {
		candidates = append(candidates, verify.Candidate{Context: name})
	}
	var wg sync.WaitGroup
	for i := range candidates {
		wg.Go(func() {
			// A context of a cluster that is gone must not hold up the
			// others.
			ctx, cancel := context.WithTimeout(ctx, contextProbeTimeout)
			defer cancel()
			candidates[i].ID, candidates[i].Err = g.contextClusterID(ctx, candidates[i].Context)
		})
	}
	wg.Wait()
	return verify.Choose(candidates, members, narrow)
}

// contextProbeTimeout bounds reading the cluster ID of one context.
const contextProbeTimeout = 10 * time.Second

// contextClusterID is the cluster ID of the cluster of the named context,
// as mcsd resolves it.
func (g *globals) contextClusterID(ctx context.Context, name string) (string, error) {
	cfg, err := g.contextConfig(name)
	if err != nil {
		return "", err
	}
	cfg.Timeout = contextProbeTimeout
	c, err := status.NewClients(cfg)
	if err != nil {
		return "", err
	}
	id, _, err := membership.ResolveClusterID(ctx, c.Kube, c.Dynamic, "")
	return id, err
}
