package proxier

import (
	"context"
	"fmt"
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
	// ModeAuto is nftables mode when the kernel and nft meet its
	// [CheckRequirements], else iptables mode.
	ModeAuto Mode = "auto"
)

// modes are the values [ParseMode] accepts.
var modes = []Mode{ModeNFTables, ModeIPTables, ModeAuto}

// ParseMode parses "nftables", "iptables" or "auto".
func ParseMode(s string) (Mode, error) {
	for _, m := range modes {
		if string(m) == s {
			return m, nil
		}
	}
	names := make([]string, len(modes))
	for i, m := range modes {
		names[i] = string(m)
	}
	return "", fmt.Errorf("unknown proxier mode %q; choose from %s", s, strings.Join(names, ", "))
}

// resolveMode returns the mode to run: mode itself (the empty mode is
// nftables), or for [ModeAuto] nftables when the host meets its
// requirements, else iptables when it meets those.
func resolveMode(ctx context.Context, mode Mode) (Mode, error) {
	switch mode {
	case "", ModeNFTables:
		return ModeNFTables, nil
	case ModeIPTables:
		return ModeIPTables, nil
	case ModeAuto:
		nftErr := checkNFTables(ctx)
		if nftErr == nil {
			return ModeNFTables, nil
		}
		if err := checkIPTables(); err != nil {
			return "", fmt.Errorf("neither nftables (%w) nor iptables (%w) is usable", nftErr, err)
		}
		return ModeIPTables, nil
	}
	_, err := ParseMode(string(mode))
	return "", err
}
