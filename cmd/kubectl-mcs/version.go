package main

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/mcsd-io/mcsd/internal/version"
)

// versions is version's -o json/yaml document.
type versions struct {
	Client version.Info `json:"client"`
	// Members are the mcsd versions of the clusters on the broker; absent
	// with --client.
	Members []memberVersion `json:"members,omitempty"`
	// Warnings say where the members are beyond the supported skew.
	Warnings []string `json:"warnings,omitempty"`
}

// memberVersion is the mcsd one member runs, as its heartbeat Lease says
// (empty: no Lease, or an mcsd that does not write its version).
type memberVersion struct {
	Cluster string `json:"cluster"`
	Version string `json:"version"`
}

func newVersionCmd(g *globals) *cobra.Command {
	var out outputFlag
	var b brokerFlags
	var clientOnly bool
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the client's version and the mcsd version of every member",
		Long: fmt.Sprintf(`Print the version of kubectl mcs, and the version of the mcsd of every
member of the clusterset, as each writes it on its heartbeat Lease on the
broker. Members more than %d minor version apart (or a major version apart)
are beyond the supported skew: a warning says which, and the README's
"Upgrades" says in what order to upgrade.

The broker is read with --broker-context, else with the member's own broker
credentials (the Secret mcsd-broker in --namespace of --context).`, version.SupportedMinorSkew),
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := out.validate(); err != nil {
				return err
			}
			doc := versions{Client: version.Get()}
			if !clientOnly {
				ctx, cancel := context.WithTimeout(cmd.Context(), time.Minute)
				defer cancel()
				s, err := b.snapshot(ctx, g)
				if err != nil {
					fmt.Fprintln(g.streams.Out, "Client:", doc.Client)
					return fmt.Errorf("reading the members' versions: %w (--client prints the client's alone)", err)
				}
				byCluster := map[string]string{}
				for _, c := range s.Clusters(nil) {
					doc.Members = append(doc.Members, memberVersion{Cluster: c.ID, Version: c.Version})
					byCluster[c.ID] = c.Version
				}
				doc.Warnings = version.Skew(byCluster)
			}
			if done, err := out.print(g.streams.Out, doc); done {
				return err
			}
			fmt.Fprintln(g.streams.Out, "Client:", doc.Client)
			if !clientOnly {
				w := newTable(g.streams.Out)
				fmt.Fprintln(w, "CLUSTER\tMCSD")
				for _, m := range doc.Members {
					fmt.Fprintf(w, "%s\t%s\n", m.Cluster, orDash(m.Version))
				}
				if err := w.Flush(); err != nil {
					return err
				}
			}
			for _, warning := range doc.Warnings {
				fmt.Fprintln(g.streams.ErrOut, "warning:", warning)
			}
			return nil
		},
	}
	out.add(cmd)
	b.add(cmd)
	cmd.Flags().BoolVar(&clientOnly, "client", false, "print the client's version only, without reading the broker")
	return cmd
}
