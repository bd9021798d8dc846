package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"

	"github.com/mcsd-io/mcsd/broker"
)

func newExportRulesCmd(g *globals) *cobra.Command {
	var namespace string
	cmd := &cobra.Command{
		Use:   "export-rules",
		Short: "Show and edit who may export which namespaces",
		Long: `Export rules say which members may export services of which namespaces. By
default, with no rule, any member may export any namespace (the KEP's
namespace sameness). A rule names namespaces (names, or prefixes ending in
*) and the members that may export them; a member may export a namespace
only when every rule that covers it lists the member. The broker refuses
other members' records and EndpointSlices of those namespaces, and
exporters and importers leave out those written before the rule.`,
	}
	cmd.PersistentFlags().StringVar(&namespace, "broker-namespace", broker.DefaultNamespace, "the broker namespace")
	cmd.AddCommand(newExportRulesShowCmd(g, &namespace), newExportRulesSetCmd(g, &namespace), newExportRulesDeleteCmd(g, &namespace))
	return cmd
}

// newExportRulesShowCmd lists the rules of the broker namespace *namespace
// (a persistent flag of the parent).
func newExportRulesShowCmd(g *globals, namespace *string) *cobra.Command {
	var out outputFlag
	show := &cobra.Command{
		Use:     "show",
		Short:   "List the export rules",
		Example: `  kubectl mcs broker export-rules show --broker-context BROKER`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := out.validate(); err != nil {
				return err
			}
			kube, err := g.adminClient()
			if err != nil {
				return err
			}
			rules, err := broker.ListExportRules(cmd.Context(), kube, *namespace)
			if err != nil {
				return err
			}
			if rules == nil {
				rules = broker.ExportRules{}
			}
			if done, err := out.print(g.streams.Out, rules); done {
				return err
			}
			if len(rules) == 0 {
				fmt.Fprintln(g.streams.ErrOut, "no export rules: every member may export every namespace")
				return nil
			}
			w := newTable(g.streams.Out)
			fmt.Fprintln(w, "RULE\tNAMESPACES\tMEMBERS")
			for _, r := range rules {
				members := strings.Join(r.Members, ",")
				if members == "" {
					members = "(none)"
				}
				fmt.Fprintf(w, "%s\t%s\t%s\n", r.Name, strings.Join(r.Namespaces, ","), members)
			}
			return w.Flush()
		},
	}
	out.add(show)
	return show
}

func newExportRulesSetCmd(g *globals, namespace *string) *cobra.Command {
	var namespaces, members string
	set := &cobra.Command{
		Use:   "set NAMESPACE|RULE --members ID[,ID...] [--namespaces NS[,PREFIX*...]]",
		Short: "Create or replace an export rule",
		Long: `Keep a namespace to the members that own it: set NAMESPACE --members ID,...
writes the rule NAMESPACE, which covers that namespace alone. With
--namespaces, the argument is the rule's name and the rule covers the
namespaces and prefixes (ending in *) listed there instead. Either way the
rule is created or replaced, and the command returns once the broker
enforces it (a member it keeps out is refused). --members may be empty:
then no member may export those namespaces.`,
		Example: `  # Only east and west may export services of namespace shop.
  kubectl mcs broker export-rules set shop --members east,west --broker-context BROKER

  # One rule, named shop, for shop and every namespace starting with shop-.
  kubectl mcs broker export-rules set shop --namespaces shop,shop-* --members east,west --broker-context BROKER`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			covered := namespaces
			if !cmd.Flags().Changed("namespaces") {
				if strings.HasSuffix(args[0], "*") {
					return fmt.Errorf("%q is a prefix: name the rule and give the prefix with --namespaces (set NAME --namespaces '%s' --members ...)", args[0], args[0])
				}
				covered = args[0]
			}
			rule := broker.NewExportRule(args[0], covered, members)
			if err := rule.Validate(); err != nil {
				return err
			}
			cfg, err := g.adminConfig()
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), 3*time.Minute)
			defer cancel()
			if err := broker.SetExportRule(ctx, cfg, *namespace, rule); err != nil {
				return err
			}
			fmt.Fprintf(g.streams.Out, "export rule %s: only %s may export %s\n", rule.Name, orNone(rule.Members), strings.Join(rule.Namespaces, ","))
			return nil
		},
	}
	set.Flags().StringVar(&namespaces, "namespaces", "", "comma-separated namespaces, or prefixes ending in *, the rule covers (default: the namespace named by the argument)")
	set.Flags().StringVar(&members, "members", "", "comma-separated cluster IDs that may export them")
	return set
}

func newExportRulesDeleteCmd(g *globals, namespace *string) *cobra.Command {
	return &cobra.Command{
		Use:     "delete RULE",
		Short:   "Delete an export rule",
		Example: `  kubectl mcs broker export-rules delete shop --broker-context BROKER`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			kube, err := g.adminClient()
			if err != nil {
				return err
			}
			if err := broker.DeleteExportRule(cmd.Context(), kube, *namespace, args[0]); err != nil {
				return err
			}
			fmt.Fprintf(g.streams.Out, "export rule %s deleted\n", args[0])
			return nil
		},
	}
}

func (g *globals) adminClient() (kubernetes.Interface, error) {
	cfg, err := g.adminConfig()
	if err != nil {
		return nil, err
	}
	return kubernetes.NewForConfig(cfg)
}

// exportRulesHint is the line broker install and join end with. Without a
// rule every member may export every namespace, and the oldest export of a
// name decides its service: a namespace's owners are kept to it only once
// a rule names them.
func exportRulesHint(members, brokerNamespace string) string {
	hint := "to keep a namespace to the members that own it: kubectl mcs broker export-rules set NS --members " + members + " --broker-context BROKER"
	if brokerNamespace != broker.DefaultNamespace {
		hint += " --broker-namespace " + brokerNamespace
	}
	return hint
}

func orNone(members []string) string {
	if len(members) == 0 {
		return "no member"
	}
	return strings.Join(members, ",")
}
