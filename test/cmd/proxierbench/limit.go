package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"time"

	"sigs.k8s.io/knftables"

	"github.com/mcsd-io/mcsd/proxier"
	"github.com/mcsd-io/mcsd/proxier/netfilter"
)

// The limit beside each full sync is the kernel's (and nft's or
// iptables-restore's) cost alone: the very input mcsd's first sync wrote,
// loaded from a file by the command-line tool into a node without the
// proxier's rules, in one transaction (per table for iptables).

// firstNFT keeps the first transaction the proxier runs. It keeps the
// transaction, not its text: rendering the text here would be timed as
// part of mcsd's sync.
type firstNFT struct {
	knftables.Interface
	mu    sync.Mutex
	first *knftables.Transaction
}

func (f *firstNFT) Run(ctx context.Context, tx *knftables.Transaction) error {
	f.mu.Lock()
	if f.first == nil {
		f.first = tx
	}
	f.mu.Unlock()
	return f.Interface.Run(ctx, tx)
}

// input is the first transaction as nft -f reads it.
func (f *firstNFT) input() []byte {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.first == nil {
		return nil
	}
	return []byte(f.first.String())
}

// firstRestores keeps the first iptables-restore input of each table.
type firstRestores struct {
	netfilter.IPTables
	mu     sync.Mutex
	tables []string
	inputs map[string][]byte
}

func (f *firstRestores) Restore(ctx context.Context, table string, data []byte) error {
	f.mu.Lock()
	if f.inputs == nil {
		f.inputs = map[string][]byte{}
	}
	if _, ok := f.inputs[table]; !ok {
		f.tables = append(f.tables, table)
		f.inputs[table] = bytes.Clone(data)
	}
	f.mu.Unlock()
	return f.IPTables.Restore(ctx, table, data)
}

// limitInput is what one full sync wrote, in the order it wrote it.
type limitInput struct {
	mode   proxier.Mode
	files  []string
	nbytes int
	// cpu is the CPU time the tool took at the last load.
	cpu time.Duration
}

// saveLimitInput writes the first sync's input of run to files under dir.
func saveLimitInput(run *proxierRun, dir string) (*limitInput, error) {
	in := &limitInput{mode: run.mode}
	write := func(name string, data []byte) error {
		if len(data) == 0 {
			return fmt.Errorf("the proxier's first sync wrote nothing for %s", name)
		}
		path := filepath.Join(dir, name)
		in.files, in.nbytes = append(in.files, path), in.nbytes+len(data)
		return os.WriteFile(path, data, 0o600)
	}
	if run.mode == proxier.ModeIPTables {
		run.iptFirst.mu.Lock()
		defer run.iptFirst.mu.Unlock()
		for _, t := range run.iptFirst.tables {
			if err := write("iptables-"+t+".restore", run.iptFirst.inputs[t]); err != nil {
				return nil, err
			}
		}
		return in, nil
	}
	return in, write("ruleset.nft", run.nftFirst.input())
}

// load times loading the input into the node, from which it first removes
// both modes' rules, and removes them again after.
func (in *limitInput) load(ctx context.Context, topo *topology) (time.Duration, error) {
	var elapsed time.Duration
	err := topo.node.Do(func() error {
		_ = proxier.CleanupLeftovers(ctx, proxier.ModeAuto, nil)
		defer func() { _ = proxier.CleanupLeftovers(ctx, proxier.ModeAuto, nil) }()
		start := time.Now()
		in.cpu = 0
		for _, f := range in.files {
			var cmd *exec.Cmd
			if in.mode == proxier.ModeIPTables {
				cmd = exec.CommandContext(ctx, "iptables-restore", "-w", "5", "--noflush", f)
			} else {
				cmd = exec.CommandContext(ctx, "nft", "-f", f)
			}
			out, err := cmd.CombinedOutput()
			if err != nil {
				return fmt.Errorf("%s: %w: %s", cmd, err, firstLines(out))
			}
			in.cpu += cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
		}
		elapsed = time.Since(start)
		return nil
	})
	return elapsed, err
}

func firstLines(out []byte) []byte {
	if len(out) > 400 {
		return out[:400]
	}
	return out
}
