package proxier

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	v1 "k8s.io/api/core/v1"
)

// CleanupIPTablesLeftovers deletes everything iptables mode created through
// each of ipts (one per family), or, when none is given, through iptables
// and ip6tables on this host in the calling thread's network namespace:
// the jumps from the built-in chains, then every chain named "MCSD-..." in
// the nat and filter tables. It is what [CleanupLeftovers] is to nftables
// mode: mcsd runs it when it starts in nftables mode, so a node switched
// from iptables mode keeps no rules of it, and an embedder that stops
// using the proxier for good runs both. Nothing there is not an error, and
// costs no more than reading the ruleset.
func CleanupIPTablesLeftovers(ctx context.Context, ipts ...IPTables) error {
	if len(ipts) == 0 {
		for _, family := range []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol} {
			ipt, err := NewIPTables(family)
			if err != nil {
				return fmt.Errorf("proxier: iptables is not usable: %w", err)
			}
			ipts = append(ipts, ipt)
		}
	}
	var errs []error
	for _, ipt := range ipts {
		for _, table := range []string{iptablesNAT, iptablesFilter} {
			chains, err := ipt.ListChains(ctx, table)
			if err != nil {
				errs = append(errs, fmt.Errorf("proxier: %w", err))
				continue
			}
			var b bytes.Buffer
			var ours []string
			for _, c := range chains {
				if isIPTablesChain(c) {
					ours = append(ours, c)
				}
			}
			if len(ours) == 0 {
				// No chain of ours, so no jump to one: nothing to do,
				// and no command that would touch the table.
				continue
			}
			for _, j := range iptablesJumps {
				if j.table != table {
					continue
				}
				if err := ipt.DeleteRule(ctx, j.table, j.chain, j.args...); err != nil {
					errs = append(errs, fmt.Errorf("proxier: %w", err))
				}
			}
			// Declaring a chain flushes it, so that none references
			// another when they are deleted.
			b.WriteString("*" + table + "\n")
			for _, c := range ours {
				b.WriteString(":" + c + " - [0:0]\n")
			}
			for _, c := range ours {
				b.WriteString("-X " + c + "\n")
			}
			b.WriteString("COMMIT\n")
			if err := ipt.Restore(ctx, table, b.Bytes()); err != nil {
				errs = append(errs, fmt.Errorf("proxier: deleting the %s table's MCSD chains: %w", table, err))
			}
		}
	}
	return errors.Join(errs...)
}
