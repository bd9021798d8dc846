package harness

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// A kubelet sets machine-wide kernel tunables when it starts (its
// setupKernelTunables: overcommit, panic on oops, ...); they are not per
// network namespace. The harness saves their values before the first
// kubelet of any run changes them, in a file beside the runs' state
// directories, and writes them back when the last run with real nodes ends
// (or, after a killed run, when the next start finds no live one).
var kernelTunables = []string{
	"vm/overcommit_memory",
	"vm/panic_on_oom",
	"kernel/panic",
	"kernel/panic_on_oops",
	"kernel/keys/root_maxkeys",
	"kernel/keys/root_maxbytes",
}

const (
	kernelDefaultsFile = "kernel-tunables"
	// realNodesMarker in a run's state directory says the run starts
	// kubelets.
	realNodesMarker = "real-nodes"
)

// withKernelLock runs fn holding the lock that orders saving and restoring
// the tunables between concurrent runs.
func withKernelLock(fn func() error) error {
	if err := os.MkdirAll(StateBase(), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(filepath.Join(StateBase(), ".kernel.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		return err
	}
	defer syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	return fn()
}

// saveKernelTunables records the tunables (unless a live run already did,
// before its kubelets changed them) and marks runDir as a run with real
// nodes.
func saveKernelTunables(runDir string) error {
	return withKernelLock(func() error {
		if err := os.WriteFile(filepath.Join(runDir, realNodesMarker), nil, 0o644); err != nil {
			return err
		}
		path := filepath.Join(StateBase(), kernelDefaultsFile)
		if _, err := os.Stat(path); err == nil {
			return nil
		}
		var b strings.Builder
		for _, k := range kernelTunables {
			v, err := os.ReadFile(filepath.Join("/proc/sys", k))
			if err != nil {
				return fmt.Errorf("reading kernel tunable %s: %w", k, err)
			}
			fmt.Fprintf(&b, "%s=%s\n", k, strings.TrimSpace(string(v)))
		}
		return os.WriteFile(path, []byte(b.String()), 0o644)
	})
}

// restoreKernelTunables writes the saved tunables back, unless a live run
// other than except still has real nodes. It returns whether it restored.
func restoreKernelTunables(except string) (bool, error) {
	restored := false
	err := withKernelLock(func() error {
		path := filepath.Join(StateBase(), kernelDefaultsFile)
		data, err := os.ReadFile(path)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		runs, err := os.ReadDir(StateBase())
		if err != nil {
			return err
		}
		for _, r := range runs {
			if r.Name() == except {
				continue
			}
			pid, ok := OwnerPID(r.Name())
			if !ok || !alive(pid) {
				continue
			}
			if _, err := os.Stat(filepath.Join(StateBase(), r.Name(), realNodesMarker)); err == nil {
				return nil
			}
		}
		var errs []error
		for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
			k, v, ok := strings.Cut(line, "=")
			if !ok {
				continue
			}
			if err := os.WriteFile(filepath.Join("/proc/sys", k), []byte(v), 0o644); err != nil {
				errs = append(errs, fmt.Errorf("restoring kernel tunable %s=%s: %w", k, v, err))
			}
		}
		if len(errs) > 0 {
			return errors.Join(errs...)
		}
		restored = true
		return os.Remove(path)
	})
	return restored, err
}
