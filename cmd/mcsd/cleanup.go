package main

import (
	"context"
	"fmt"
	"time"

	"github.com/mcsd-io/mcsd/nsenter"
	"github.com/mcsd-io/mcsd/proxier"
)

// cleanup removes what the proxier left on this node, as kube-proxy's
// --cleanup does: the nftables tables of both families and the iptables
// chains (and the jumps to them) of both families, whichever mode wrote
// them. mcsd leaves its rules in place when it stops so that traffic keeps
// flowing across a restart; an uninstall runs this on every node once the
// node agents are gone.
func cleanup(o *options) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := proxier.CleanupLeftovers(ctx, proxier.ModeAuto, func(fn func() error) error { return nsenter.Do(o.netns, fn) }); err != nil {
		return fmt.Errorf("removing mcsd's nftables tables and iptables chains (--netns=%q): %w", o.netns, err)
	}
	fmt.Println("mcsd: removed its nftables tables and iptables chains from this node")
	return nil
}
