package proxier

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"

	v1 "k8s.io/api/core/v1"
	"sigs.k8s.io/knftables"

	"github.com/mcsd-io/mcsd/proxier/netfilter"
)

// CleanupLeftovers deletes everything mode's proxiers created on this host,
// for both families, running every command through inNetns (nil: in the
// calling thread's network namespace): nftables mode's tables; iptables
// mode's jumps from the built-in chains, then its chains named "MCSD-..."
// in the nat and filter tables; both for [ModeAuto]. A mode whose commands
// the host lacks has nothing to delete, and nothing there is not an error.
//
// mcsd leaves its rules in place when it exits, so that traffic keeps
// flowing across a restart; [New] runs it for the mode it does not run, so
// that a node switched between modes keeps no rules of the first, which
// would go on DNATing (or rejecting) ClusterSetIPs by an outdated view. An
// embedder that stops using the proxier for good runs it with [ModeAuto].
func CleanupLeftovers(ctx context.Context, mode Mode, inNetns func(func() error) error) error {
	if inNetns == nil {
		inNetns = func(fn func() error) error { return fn() }
	}
	var errs []error
	if mode != ModeIPTables {
		if _, err := exec.LookPath("nft"); err == nil {
			errs = append(errs, inNetns(func() error { return cleanupNFTables(ctx) }))
		}
	}
	if mode == ModeIPTables || mode == ModeAuto {
		if checkIPTables() == nil {
			errs = append(errs, inNetns(func() error { return cleanupIPTables(ctx) }))
		}
	}
	return errors.Join(errs...)
}

// cleanupNFTables deletes the proxier's table through each of nfts (one per
// family), or, when none is given, the tables of both families on this host
// in the calling thread's network namespace. A table that does not exist is
// not an error.
func cleanupNFTables(ctx context.Context, nfts ...knftables.Interface) error {
	if len(nfts) == 0 {
		for _, family := range []knftables.Family{knftables.IPv4Family, knftables.IPv6Family} {
			nft, err := knftables.New(family, TableName)
			if err != nil {
				return fmt.Errorf("proxier: nftables is not usable: %w", err)
			}
			nfts = append(nfts, nft)
		}
	}
	var errs []error
	for _, nft := range nfts {
		tx := nft.NewTransaction()
		// Adding it first makes the deletion succeed whether or not it
		// exists (nft 1.0.6 has no "destroy").
		tx.Add(&knftables.Table{})
		tx.Delete(&knftables.Table{})
		if err := nft.Run(ctx, tx); err != nil {
			errs = append(errs, fmt.Errorf("proxier: deleting table %s: %w", TableName, err))
		}
	}
	return errors.Join(errs...)
}

// cleanupIPTables deletes what iptables mode created through each of ipts
// (one per family), or, when none is given, through iptables and ip6tables
// on this host in the calling thread's network namespace: the jumps from
// the built-in chains, then every chain named "MCSD-..." in the nat and
// filter tables. It costs no more than reading the ruleset when there is
// nothing to delete.
func cleanupIPTables(ctx context.Context, ipts ...netfilter.IPTables) error {
	if len(ipts) == 0 {
		for _, family := range []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol} {
			ipt, err := netfilter.NewIPTables(family, nil)
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
