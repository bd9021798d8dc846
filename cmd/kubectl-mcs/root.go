package main

import (
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/yaml"

	"github.com/mcsd-io/mcsd/kubectlmcs/install"
)

// globals are the flags every command shares: kubectl's own (--kubeconfig,
// --context, ...), --namespace (mcsd's, in the member) and the broker's
// context.
type globals struct {
	streams genericiooptions.IOStreams
	flags   *genericclioptions.ConfigFlags
	// brokerContext is the kubeconfig context of the broker's
	// administrator; empty for commands that reach the broker as the
	// member does.
	brokerContext string
}

func newRoot(streams genericiooptions.IOStreams) *cobra.Command {
	g := &globals{streams: streams, flags: genericclioptions.NewConfigFlags(true)}
	root := &cobra.Command{
		Use:   "kubectl-mcs",
		Short: "Operate an mcsd clusterset: broker, members, status, diagnosis",
		Long: `kubectl mcs operates an mcsd clusterset (Kubernetes Multi-Cluster Services).

The member cluster is the one of --context (kubectl's current context by
default), where mcsd runs in --namespace (mcsd-system by default, whatever
namespace the kubeconfig's context names); the broker is reached with
--broker-context, an administrator's context of the broker cluster, or,
where it is enough, with the member's own broker credentials (the Secret
mcsd-broker that join writes in mcsd's namespace).`,
		Annotations:   map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl mcs"},
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetIn(streams.In)
	root.SetOut(streams.Out)
	root.SetErr(streams.ErrOut)
	g.flags.AddFlags(root.PersistentFlags())
	// kubectl's --namespace is mcsd's here: every command finds mcsd's
	// objects there, in the member.
	ns := root.PersistentFlags().Lookup("namespace")
	ns.Usage = "the namespace mcsd runs in, in the member (default " + install.DefaultNamespace + ")"
	root.PersistentFlags().StringVar(&g.brokerContext, "broker-context", "", "kubeconfig context of the broker cluster, as its administrator")
	root.AddCommand(newBrokerCmd(g), newJoinCmd(g), newLeaveCmd(g), newStatusCmd(g), newDiagnoseCmd(g), newGatherCmd(g), newVersionCmd(g), newVerifyCmd(g))
	return root
}

// mcsdNamespace is --namespace, else install.DefaultNamespace: never the
// namespace of the kubeconfig's context, which is the user's, not mcsd's.
func (g *globals) mcsdNamespace() string {
	if g.flags.Namespace != nil && *g.flags.Namespace != "" {
		return *g.flags.Namespace
	}
	return install.DefaultNamespace
}

// memberConfig is the configuration of the member cluster: --context, or
// override when not empty.
func (g *globals) memberConfig(override string) (*rest.Config, error) {
	if override != "" {
		return g.contextConfig(override)
	}
	cfg, err := g.flags.ToRESTConfig()
	if err != nil {
		return nil, err
	}
	return tune(cfg), nil
}

// brokerConfig is the configuration of --broker-context, or nil when it is
// not given.
func (g *globals) brokerConfig() (*rest.Config, error) {
	if g.brokerContext == "" {
		return nil, nil
	}
	return g.contextConfig(g.brokerContext)
}

// kubeconfigRules are the loading rules kubectl would use (--kubeconfig,
// else $KUBECONFIG, else ~/.kube/config).
func (g *globals) kubeconfigRules() *clientcmd.ClientConfigLoadingRules {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if g.flags.KubeConfig != nil && *g.flags.KubeConfig != "" {
		rules.ExplicitPath = *g.flags.KubeConfig
	}
	return rules
}

// rawKubeconfig is the kubeconfig kubectl would use, merged.
func (g *globals) rawKubeconfig() (*clientcmdapi.Config, error) {
	raw, err := g.kubeconfigRules().Load()
	if err != nil {
		return nil, fmt.Errorf("reading the kubeconfig: %w", err)
	}
	return raw, nil
}

// contextConfig loads the named context from the kubeconfig kubectl would
// use (--kubeconfig, else $KUBECONFIG, else ~/.kube/config).
func (g *globals) contextConfig(name string) (*rest.Config, error) {
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(g.kubeconfigRules(), &clientcmd.ConfigOverrides{CurrentContext: name}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("context %s: %w", name, err)
	}
	return tune(cfg), nil
}

func tune(cfg *rest.Config) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = 50, 100
	return cfg
}

// outputFlag is -o: table (default), json or yaml.
type outputFlag struct{ format string }

func (o *outputFlag) add(cmd *cobra.Command) {
	cmd.Flags().StringVarP(&o.format, "output", "o", "table", "output format: table, json or yaml")
}

func (o *outputFlag) validate() error {
	switch o.format {
	case "table", "json", "yaml":
		return nil
	}
	return fmt.Errorf("--output %q: want table, json or yaml", o.format)
}

// print writes v as JSON or YAML and reports true, or reports false for
// a table, which the caller writes.
func (o *outputFlag) print(w io.Writer, v any) (bool, error) {
	switch o.format {
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return true, enc.Encode(v)
	case "yaml":
		data, err := yaml.Marshal(v)
		if err != nil {
			return true, err
		}
		_, err = w.Write(data)
		return true, err
	}
	return false, nil
}

func newTable(w io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
}
