package proxier

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"

	v1 "k8s.io/api/core/v1"
)

// IPTables is how the proxier's iptables mode reaches one family's iptables
// (iptables or ip6tables), as knftables.Interface is how nftables mode
// reaches nft. [NewIPTables] runs the commands on this host; tests pass a
// fake that records what it is given.
type IPTables interface {
	// Restore loads data, the input of "iptables-restore --noflush" for one
	// table ("*table" ... "COMMIT"), atomically: it changes only the chains
	// data declares, and either all of it applies or none.
	Restore(ctx context.Context, table string, data []byte) error
	// EnsureRule inserts the rule (args after "-I chain") at the top of a
	// built-in chain unless it is there already, and reports whether it
	// was.
	EnsureRule(ctx context.Context, table, chain string, args ...string) (existed bool, err error)
	// DeleteRule deletes the rule if it is there.
	DeleteRule(ctx context.Context, table, chain string, args ...string) error
	// ListChains returns the names of the chains of a table. It reads the
	// whole table (iptables-save), so the proxier calls it only when it
	// starts over, never on an ordinary sync.
	ListChains(ctx context.Context, table string) ([]string, error)
}

// execIPTables runs the iptables commands of one family.
type execIPTables struct {
	iptables, restore, save string
}

// NewIPTables returns the [IPTables] of family on this host: the iptables,
// iptables-restore and iptables-save commands on PATH (ip6tables... for
// IPv6). Whichever variant the node's alternatives select, nft-backed
// (Debian's default since 11) or legacy, works; the proxier uses only what
// both support. The commands inherit the network namespace of the thread
// that runs them.
func NewIPTables(family v1.IPFamily) (IPTables, error) {
	base := "iptables"
	if family == v1.IPv6Protocol {
		base = "ip6tables"
	}
	e := &execIPTables{iptables: base, restore: base + "-restore", save: base + "-save"}
	for _, cmd := range []string{e.iptables, e.restore, e.save} {
		if _, err := exec.LookPath(cmd); err != nil {
			return nil, fmt.Errorf("%s is not on PATH (install the iptables package): %w", cmd, err)
		}
	}
	return e, nil
}

// waitSeconds is how long a command waits for the xtables lock another
// program holds (the legacy variant's lock; the nft variant ignores it).
const waitSeconds = "5"

func (e *execIPTables) Restore(ctx context.Context, table string, data []byte) error {
	cmd := exec.CommandContext(ctx, e.restore, "-w", waitSeconds, "--noflush")
	cmd.Stdin = bytes.NewReader(data)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s of table %s: %w: %s", e.restore, table, err, strings.TrimSpace(string(out)))
	}
	return nil
}

func (e *execIPTables) EnsureRule(ctx context.Context, table, chain string, args ...string) (bool, error) {
	check := append([]string{"-w", waitSeconds, "-t", table, "-C", chain}, args...)
	out, err := exec.CommandContext(ctx, e.iptables, check...).CombinedOutput()
	if err == nil {
		return true, nil
	}
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		return false, fmt.Errorf("%s -t %s -C %s: %w: %s", e.iptables, table, chain, err, strings.TrimSpace(string(out)))
	}
	insert := append([]string{"-w", waitSeconds, "-t", table, "-I", chain}, args...)
	if out, err := exec.CommandContext(ctx, e.iptables, insert...).CombinedOutput(); err != nil {
		return false, fmt.Errorf("%s -t %s -I %s: %w: %s", e.iptables, table, chain, err, strings.TrimSpace(string(out)))
	}
	return false, nil
}

func (e *execIPTables) DeleteRule(ctx context.Context, table, chain string, args ...string) error {
	check := append([]string{"-w", waitSeconds, "-t", table, "-C", chain}, args...)
	if exec.CommandContext(ctx, e.iptables, check...).Run() != nil {
		// Not there (or the table is gone): nothing to delete.
		return nil
	}
	del := append([]string{"-w", waitSeconds, "-t", table, "-D", chain}, args...)
	if out, err := exec.CommandContext(ctx, e.iptables, del...).CombinedOutput(); err != nil {
		return fmt.Errorf("%s -t %s -D %s: %w: %s", e.iptables, table, chain, err, strings.TrimSpace(string(out)))
	}
	return nil
}

func (e *execIPTables) ListChains(ctx context.Context, table string) ([]string, error) {
	out, err := exec.CommandContext(ctx, e.save, "-t", table).Output()
	if err != nil {
		return nil, fmt.Errorf("%s -t %s: %w", e.save, table, err)
	}
	return chainsOfSave(out), nil
}

// chainsOfSave returns the chains an iptables-save dump declares
// (":NAME POLICY [packets:bytes]").
func chainsOfSave(dump []byte) []string {
	var chains []string
	s := bufio.NewScanner(bytes.NewReader(dump))
	s.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for s.Scan() {
		line := s.Text()
		if !strings.HasPrefix(line, ":") {
			continue
		}
		if name, _, ok := strings.Cut(line[1:], " "); ok {
			chains = append(chains, name)
		}
	}
	return chains
}
