package netfilter

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
// fake that records what it is given, and benchmarks wrap the real one.
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
	// ListChains returns the names of the chains of a table, none if the
	// table does not exist. It reads the whole ruleset (iptables-save), so
	// the proxier calls it only when it starts over, never on an ordinary
	// sync.
	ListChains(ctx context.Context, table string) ([]string, error)
}

// execIPTables runs the iptables commands of one family.
type execIPTables struct {
	iptables, restore, save string
	// in runs each command, for example inside a network namespace.
	in func(func() error) error
}

// NewIPTables returns the [IPTables] of family on this host: the iptables,
// iptables-restore and iptables-save commands on PATH (ip6tables... for
// IPv6). Whichever variant the node's alternatives select, nft-backed
// (Debian's default since 11) or legacy, works; the proxier uses only what
// both support. Every command is started through inNetns (nil: on the
// calling thread, in its network namespace), as the proxier's
// Config.InNetns.
func NewIPTables(family v1.IPFamily, inNetns func(fn func() error) error) (IPTables, error) {
	if inNetns == nil {
		inNetns = func(fn func() error) error { return fn() }
	}
	base := "iptables"
	if family == v1.IPv6Protocol {
		base = "ip6tables"
	}
	e := &execIPTables{iptables: base, restore: base + "-restore", save: base + "-save", in: inNetns}
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

// run runs a command with stdin and returns its combined output; the error
// names the command and carries what it printed.
func (e *execIPTables) run(ctx context.Context, stdin []byte, name string, args ...string) ([]byte, error) {
	var out []byte
	err := e.in(func() error {
		cmd := exec.CommandContext(ctx, name, args...)
		if stdin != nil {
			cmd.Stdin = bytes.NewReader(stdin)
		}
		var err error
		out, err = cmd.CombinedOutput()
		return err
	})
	if err != nil {
		return out, fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return out, nil
}

func (e *execIPTables) Restore(ctx context.Context, table string, data []byte) error {
	_, err := e.run(ctx, data, e.restore, "-w", waitSeconds, "--noflush")
	return err
}

// check runs "iptables -C" and says whether the rule is there; exit status
// 1 is "no such rule", anything else an error.
func (e *execIPTables) check(ctx context.Context, table, chain string, args []string) (bool, error) {
	_, err := e.run(ctx, nil, e.iptables, append([]string{"-w", waitSeconds, "-t", table, "-C", chain}, args...)...)
	var exit *exec.ExitError
	switch {
	case err == nil:
		return true, nil
	case errors.As(err, &exit) && exit.ExitCode() == 1:
		return false, nil
	}
	return false, err
}

func (e *execIPTables) EnsureRule(ctx context.Context, table, chain string, args ...string) (bool, error) {
	if ok, err := e.check(ctx, table, chain, args); ok || err != nil {
		return ok, err
	}
	_, err := e.run(ctx, nil, e.iptables, append([]string{"-w", waitSeconds, "-t", table, "-I", chain}, args...)...)
	return false, err
}

func (e *execIPTables) DeleteRule(ctx context.Context, table, chain string, args ...string) error {
	if ok, err := e.check(ctx, table, chain, args); !ok || err != nil {
		// Not there, or the jump's target chain is gone with it.
		return nil
	}
	_, err := e.run(ctx, nil, e.iptables, append([]string{"-w", waitSeconds, "-t", table, "-D", chain}, args...)...)
	return err
}

func (e *execIPTables) ListChains(ctx context.Context, table string) ([]string, error) {
	// Without -t, iptables-save dumps only the tables that exist: with -t,
	// the legacy variant would have the kernel load the table's module on a
	// node that never used it (an nftables-mode node cleaning up).
	out, err := e.run(ctx, nil, e.save)
	if err != nil {
		return nil, err
	}
	return chainsOfSave(out, table), nil
}

// chainsOfSave returns the chains an iptables-save dump declares
// (":NAME POLICY [packets:bytes]") in table.
func chainsOfSave(dump []byte, table string) []string {
	var chains []string
	in := false
	s := bufio.NewScanner(bytes.NewReader(dump))
	s.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for s.Scan() {
		line := s.Text()
		switch {
		case strings.HasPrefix(line, "*"):
			in = line[1:] == table
		case in && strings.HasPrefix(line, ":"):
			if name, _, ok := strings.Cut(line[1:], " "); ok {
				chains = append(chains, name)
			}
		}
	}
	return chains
}
