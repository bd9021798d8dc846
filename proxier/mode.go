package proxier

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
)

// Mode is the proxier's backend: the kernel interface its rules go through.
type Mode string

const (
	// ModeNFTables programs one nftables table per family (the default).
	ModeNFTables Mode = "nftables"
	// ModeIPTables programs chains of mcsd's own in the iptables nat and
	// filter tables, in kube-proxy iptables mode's shape, for nodes whose
	// kernel or nft is too old for nftables mode.
	ModeIPTables Mode = "iptables"
	// ModeAuto is nftables mode when the kernel and nft meet
	// [CheckRequirements], else iptables mode.
	ModeAuto Mode = "auto"
)

// Modes are the values [ParseMode] accepts.
var Modes = []Mode{ModeNFTables, ModeIPTables, ModeAuto}

// ParseMode parses "nftables", "iptables" or "auto".
func ParseMode(s string) (Mode, error) {
	for _, m := range Modes {
		if string(m) == s {
			return m, nil
		}
	}
	names := make([]string, len(Modes))
	for i, m := range Modes {
		names[i] = string(m)
	}
	return "", fmt.Errorf("unknown proxier mode %q; choose from %s", s, strings.Join(names, ", "))
}

// ResolveMode returns the mode to run: mode itself (the empty mode is
// nftables), or for [ModeAuto] nftables when [CheckRequirements] passes on
// this host, else iptables when [CheckIPTablesRequirements] does.
func ResolveMode(ctx context.Context, mode Mode) (Mode, error) {
	switch mode {
	case "", ModeNFTables:
		return ModeNFTables, nil
	case ModeIPTables:
		return ModeIPTables, nil
	case ModeAuto:
		nftErr := CheckRequirements(ctx)
		if nftErr == nil {
			return ModeNFTables, nil
		}
		if err := CheckIPTablesRequirements(); err != nil {
			return "", fmt.Errorf("neither nftables (%w) nor iptables (%w) is usable", nftErr, err)
		}
		return ModeIPTables, nil
	}
	_, err := ParseMode(string(mode))
	return "", err
}

// CheckIPTablesRequirements returns an error naming what is missing when
// the commands of iptables mode are not on PATH. Any iptables that has
// iptables-restore --noflush and the statistic, recent, conntrack and
// comment matches, the nft-backed variant or the legacy one, will do.
func CheckIPTablesRequirements() error {
	for _, cmd := range []string{"iptables", "iptables-restore", "iptables-save"} {
		if _, err := exec.LookPath(cmd); err != nil {
			return fmt.Errorf("%s is not on PATH (install the iptables package): %w", cmd, err)
		}
	}
	return nil
}

// CleanupOtherMode deletes what the mode other than mode left on this node:
// nftables mode's tables when mode is iptables, iptables mode's chains when
// it is nftables. mcsd calls it when the proxier starts, so that a node
// switched from one mode to the other keeps no rules of the first, which
// would go on DNATing (or rejecting) ClusterSetIPs by an outdated view. A
// host without the other mode's commands has nothing of it to clean. Every
// command runs through in (nil: in the calling thread's network namespace).
func CleanupOtherMode(ctx context.Context, mode Mode, in func(func() error) error) error {
	if in == nil {
		in = func(fn func() error) error { return fn() }
	}
	if mode == ModeIPTables {
		if _, err := exec.LookPath("nft"); err != nil {
			return nil
		}
		return in(func() error { return CleanupLeftovers(ctx) })
	}
	if CheckIPTablesRequirements() != nil {
		return nil
	}
	return in(func() error { return CleanupIPTablesLeftovers(ctx) })
}
