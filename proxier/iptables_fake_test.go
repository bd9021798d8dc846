package proxier

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
)

// fakeIPTables is an IPTables that keeps one family's nat and filter
// tables in memory and records every restore input. Like iptables-restore
// --noflush it changes only the chains an input declares, and it refuses
// what iptables refuses: a rule in a chain that does not exist, a jump to
// a chain that does not exist after the input, deleting a chain that is
// referenced or not empty.
type fakeIPTables struct {
	mu     sync.Mutex
	tables map[string]*fakeTable
	// restores are the inputs of every Restore, successful or not.
	restores []fakeRestore
	// commands counts the other calls ("-C", "-I", "-D", "save"): an
	// incremental sync must make none but its jump check.
	commands []string
	// failRestores makes the next n Restores fail.
	failRestores int
}

type fakeRestore struct {
	table, input string
}

// fakeTable is one table: each chain's rules, as the text after
// "-A CHAIN ".
type fakeTable struct {
	chains map[string][]string
}

// iptablesBuiltins are the built-in chains of each table the proxier uses.
var iptablesBuiltins = map[string][]string{
	iptablesNAT:    {"PREROUTING", "INPUT", "OUTPUT", "POSTROUTING"},
	iptablesFilter: {"INPUT", "FORWARD", "OUTPUT"},
}

// iptablesTargets are the targets that are not chains.
var iptablesTargets = []string{"ACCEPT", "DROP", "RETURN", "REJECT", "DNAT", "MARK", "MASQUERADE"}

func newFakeIPTables() *fakeIPTables {
	f := &fakeIPTables{tables: map[string]*fakeTable{}}
	for table, builtins := range iptablesBuiltins {
		t := &fakeTable{chains: map[string][]string{}}
		for _, c := range builtins {
			t.chains[c] = nil
		}
		f.tables[table] = t
	}
	return f
}

func (t *fakeTable) clone() *fakeTable {
	c := &fakeTable{chains: make(map[string][]string, len(t.chains))}
	for name, rules := range t.chains {
		c.chains[name] = slices.Clone(rules)
	}
	return c
}

// target is the chain or target a rule jumps to, "" if none.
func target(rule string) string {
	f := strings.Fields(rule)
	for i := 0; i < len(f)-1; i++ {
		if f[i] == "-j" || f[i] == "-g" {
			return f[i+1]
		}
	}
	return ""
}

// check refuses jumps to chains that do not exist.
func (t *fakeTable) check() error {
	for name, rules := range t.chains {
		for _, r := range rules {
			if j := target(r); j != "" && !slices.Contains(iptablesTargets, j) && !t.exists(j) {
				return fmt.Errorf("chain %s: rule %q jumps to a chain that does not exist", name, r)
			}
		}
	}
	return nil
}

func (t *fakeTable) exists(chain string) bool {
	_, ok := t.chains[chain]
	return ok
}

func (t *fakeTable) referenced(chain string) bool {
	for _, rules := range t.chains {
		for _, r := range rules {
			if target(r) == chain {
				return true
			}
		}
	}
	return false
}

func (f *fakeIPTables) Restore(_ context.Context, table string, data []byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.restores = append(f.restores, fakeRestore{table: table, input: string(data)})
	if f.failRestores > 0 {
		f.failRestores--
		return fmt.Errorf("iptables-restore: injected failure")
	}
	t := f.tables[table].clone()
	lines := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
	if len(lines) < 2 || lines[0] != "*"+table || lines[len(lines)-1] != "COMMIT" {
		return fmt.Errorf("iptables-restore: input is not one *%s ... COMMIT block", table)
	}
	builtins := iptablesBuiltins[table]
	for i, line := range lines[1 : len(lines)-1] {
		fields := strings.Fields(line)
		switch {
		case strings.HasPrefix(line, ":"):
			name := fields[0][1:]
			if len(name) > 28 {
				return fmt.Errorf("line %d: chain name %q is longer than 28 characters", i+2, name)
			}
			if !slices.Contains(builtins, name) {
				// Declaring a chain creates it, or flushes it.
				t.chains[name] = []string{}
			}
		case len(fields) >= 2 && fields[0] == "-A":
			if !t.exists(fields[1]) {
				return fmt.Errorf("line %d: chain %s does not exist", i+2, fields[1])
			}
			t.chains[fields[1]] = append(t.chains[fields[1]], strings.TrimPrefix(line, "-A "+fields[1]+" "))
		case len(fields) == 2 && fields[0] == "-X":
			name := fields[1]
			switch {
			case !t.exists(name) || slices.Contains(builtins, name):
				return fmt.Errorf("line %d: no user chain %s to delete", i+2, name)
			case len(t.chains[name]) > 0:
				return fmt.Errorf("line %d: chain %s is not empty", i+2, name)
			case t.referenced(name):
				return fmt.Errorf("line %d: chain %s is still referenced", i+2, name)
			}
			delete(t.chains, name)
		default:
			return fmt.Errorf("line %d: cannot parse %q", i+2, line)
		}
	}
	if err := t.check(); err != nil {
		return fmt.Errorf("iptables-restore: %w", err)
	}
	f.tables[table] = t
	return nil
}

func (f *fakeIPTables) EnsureRule(_ context.Context, table, chain string, args ...string) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.commands = append(f.commands, "-C "+chain)
	t := f.tables[table]
	rule := strings.Join(quoteArgs(args), " ")
	if slices.Contains(t.chains[chain], rule) {
		return true, nil
	}
	if j := target(rule); !t.exists(j) {
		return false, fmt.Errorf("iptables -I %s: chain %s does not exist", chain, j)
	}
	f.commands = append(f.commands, "-I "+chain)
	t.chains[chain] = append([]string{rule}, t.chains[chain]...)
	return false, nil
}

func (f *fakeIPTables) DeleteRule(_ context.Context, table, chain string, args ...string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.commands = append(f.commands, "-D "+chain)
	t := f.tables[table]
	rule := strings.Join(quoteArgs(args), " ")
	if i := slices.Index(t.chains[chain], rule); i >= 0 {
		t.chains[chain] = slices.Delete(t.chains[chain], i, i+1)
	}
	return nil
}

func (f *fakeIPTables) ListChains(_ context.Context, table string) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.commands = append(f.commands, "save "+table)
	var names []string
	for name := range f.tables[table].chains {
		names = append(names, name)
	}
	slices.Sort(names)
	return names, nil
}

// quoteArgs writes args as iptables-save would: with double quotes around
// those that hold a space.
func quoteArgs(args []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		if strings.ContainsAny(a, " ") {
			a = `"` + a + `"`
		}
		out[i] = a
	}
	return out
}

// take returns the restore inputs and commands since the last take.
func (f *fakeIPTables) take() ([]fakeRestore, []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r, c := f.restores, f.commands
	f.restores, f.commands = nil, nil
	return r, c
}

// rules returns a chain's rules.
func (f *fakeIPTables) rules(table, chain string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.tables[table].chains[chain])
}

// chains returns the proxier's chains of a table, sorted.
func (f *fakeIPTables) chains(table string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var names []string
	for name := range f.tables[table].chains {
		if isIPTablesChain(name) {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names
}

// dump is the tables as iptables-save would print them, chains sorted.
func (f *fakeIPTables) dump() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var b strings.Builder
	for _, table := range []string{iptablesFilter, iptablesNAT} {
		t := f.tables[table]
		fmt.Fprintf(&b, "*%s\n", table)
		names := slices.Clone(iptablesBuiltins[table])
		var own []string
		for name := range t.chains {
			if !slices.Contains(names, name) {
				own = append(own, name)
			}
		}
		slices.Sort(own)
		names = append(names, own...)
		for _, name := range names {
			fmt.Fprintf(&b, ":%s\n", name)
		}
		for _, name := range names {
			for _, r := range t.chains[name] {
				fmt.Fprintf(&b, "-A %s %s\n", name, r)
			}
		}
		b.WriteString("COMMIT\n")
	}
	return b.String()
}
