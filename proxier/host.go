package proxier

import (
	"context"
	"fmt"

	"k8s.io/klog/v2"
	"sigs.k8s.io/knftables"

	"github.com/mcsd-io/mcsd/proxier/netfilter"
)

// prepareHost resolves cfg's mode and makes what its proxiers share on the
// host: the conntrack handle and, in nftables mode, the rule counter, each
// inside cfg.InNetns unless cfg gives its own. When the proxier programs
// the host's kernel itself (cfg gives no kernel interface of the mode), it
// checks the host's requirements first and deletes the other mode's
// leftovers.
func prepareHost(cfg Config) (Config, error) {
	ctx := context.Background()
	if cfg.Logger.GetSink() == nil {
		cfg.Logger = klog.Background()
	}
	requested := cfg.Mode
	mode, err := resolveMode(ctx, cfg.Mode)
	if err != nil {
		return cfg, fmt.Errorf("proxier: %w", err)
	}
	cfg.Mode = mode
	if cfg.InNetns == nil {
		cfg.InNetns = func(fn func() error) error { return fn() }
	}
	if onHost := (mode == ModeNFTables && cfg.NFTables == nil) || (mode == ModeIPTables && cfg.IPTables == nil); onHost {
		if err := CheckRequirements(ctx, mode); err != nil {
			return cfg, fmt.Errorf("proxier: %w", err)
		}
		cfg.Logger.Info("Proxier mode", "mode", mode, "requested", requested)
		other := ModeIPTables
		if mode == ModeIPTables {
			other = ModeNFTables
		}
		if err := CleanupLeftovers(ctx, other, cfg.InNetns); err != nil {
			cfg.Logger.Error(err, "Could not delete the rules of the other proxier mode; they may still catch ClusterSetIP traffic", "mode", mode)
		}
	}
	err = cfg.InNetns(func() (err error) {
		if cfg.Conntrack == nil {
			if cfg.Conntrack, err = netfilter.NewConntrack(); err != nil {
				return err
			}
		}
		if mode == ModeNFTables && cfg.RuleCounter == nil {
			cfg.RuleCounter, err = netfilter.NewRuleCounter(TableName)
		}
		return err
	})
	if err != nil {
		return cfg, fmt.Errorf("proxier: %w", err)
	}
	return cfg, nil
}

// netnsNFTables is a knftables.Interface whose every call runs through a
// network-namespace runner: knftables runs the nft binary, and a process
// started from a thread switched into a namespace inherits it, so the table
// it programs is that namespace's.
type netnsNFTables struct {
	in func(func() error) error
	knftables.Interface
}

var _ knftables.Interface = (*netnsNFTables)(nil)

// newNFTablesIn returns the nftables interface of the proxier's table in
// family, made and run through in.
func newNFTablesIn(in func(func() error) error, family knftables.Family) (knftables.Interface, error) {
	n := &netnsNFTables{in: in}
	err := in(func() (err error) {
		n.Interface, err = knftables.New(family, TableName)
		return err
	})
	if err != nil {
		return nil, err
	}
	return n, nil
}

func (n *netnsNFTables) Run(ctx context.Context, tx *knftables.Transaction) error {
	return n.in(func() error { return n.Interface.Run(ctx, tx) })
}

func (n *netnsNFTables) Check(ctx context.Context, tx *knftables.Transaction) error {
	return n.in(func() error { return n.Interface.Check(ctx, tx) })
}

func (n *netnsNFTables) ListAll(ctx context.Context) (result map[string][]string, err error) {
	err = n.in(func() error { result, err = n.Interface.ListAll(ctx); return err })
	return result, err
}

func (n *netnsNFTables) List(ctx context.Context, objectType string) (result []string, err error) {
	err = n.in(func() error { result, err = n.Interface.List(ctx, objectType); return err })
	return result, err
}

func (n *netnsNFTables) ListRules(ctx context.Context, chain string) (result []*knftables.Rule, err error) {
	err = n.in(func() error { result, err = n.Interface.ListRules(ctx, chain); return err })
	return result, err
}

func (n *netnsNFTables) ListElements(ctx context.Context, objectType, name string) (result []*knftables.Element, err error) {
	err = n.in(func() error { result, err = n.Interface.ListElements(ctx, objectType, name); return err })
	return result, err
}

func (n *netnsNFTables) ListCounters(ctx context.Context) (result []*knftables.Counter, err error) {
	err = n.in(func() error { result, err = n.Interface.ListCounters(ctx); return err })
	return result, err
}
