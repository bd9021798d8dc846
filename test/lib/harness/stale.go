package harness

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"

	"github.com/mcsd-io/mcsd/test/lib/netns"
)

// Every run owns a state directory <StateBase>/<pid>x<seq> and the network
// namespaces named mcsdh<pid>x<seq>-*. Both carry the owner's pid so a later
// run can tell leftovers of a dead owner (a killed test) from a live one's.
const netnsPrefix = "mcsdh"

var runSeq atomic.Int64

// StateBase is the directory that holds every run's state directory.
func StateBase() string {
	if base := os.Getenv("MCSD_HARNESS_DIR"); base != "" {
		return base
	}
	// etcd fsyncs every write: tmpfs keeps that cheap.
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		return "/dev/shm/mcsd-harness"
	}
	return filepath.Join(os.TempDir(), "mcsd-harness")
}

func newRunID() string {
	return fmt.Sprintf("%dx%d", os.Getpid(), runSeq.Add(1))
}

func alive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// OwnerPID returns the pid of the process that owns a run.
func OwnerPID(runID string) (int, bool) {
	pid, err := strconv.Atoi(strings.SplitN(runID, "x", 2)[0])
	return pid, err == nil
}

// CleanStale removes what runs whose owner process is gone left behind:
// their processes, the processes and cgroups of their real nodes (container
// processes and shims outlive the killed run; the nodes' mounts go with the
// last process of each node's mount namespace), network namespaces and
// state directories, and it puts back the kernel tunables their kubelets
// changed unless a live run still has kubelets. Runs of live owners are
// untouched. It returns what it removed, for logs.
func CleanStale() ([]string, error) {
	removed, err := staleCgroups()
	if err != nil {
		return removed, err
	}
	base := StateBase()
	entries, err := os.ReadDir(base)
	if err != nil && !os.IsNotExist(err) {
		return nil, err
	}
	for _, e := range entries {
		pid, ok := OwnerPID(e.Name())
		if !ok || alive(pid) {
			continue
		}
		dir := filepath.Join(base, e.Name())
		pidFiles, _ := filepath.Glob(filepath.Join(dir, "*.pid"))
		for _, f := range pidFiles {
			data, err := os.ReadFile(f)
			if err != nil {
				continue
			}
			child, err := strconv.Atoi(strings.TrimSpace(string(data)))
			if err != nil || !alive(child) || !isHarnessProcess(child) {
				continue
			}
			_ = syscall.Kill(-child, syscall.SIGKILL)
			_ = syscall.Kill(child, syscall.SIGKILL)
			removed = append(removed, fmt.Sprintf("process %d (%s)", child, filepath.Base(f)))
		}
		if err := os.RemoveAll(dir); err != nil {
			return removed, err
		}
		removed = append(removed, "directory "+dir)
	}
	names, err := netns.List(netnsPrefix)
	if err != nil {
		return removed, err
	}
	for _, name := range names {
		runID := strings.SplitN(strings.TrimPrefix(name, netnsPrefix), "-", 2)[0]
		pid, ok := OwnerPID(runID)
		if !ok || alive(pid) {
			continue
		}
		if err := netns.DeleteNamed(name); err != nil {
			return removed, err
		}
		removed = append(removed, "network namespace "+name)
	}
	restored, err := restoreKernelTunables("")
	if restored {
		removed = append(removed, "kernel tunables changed by kubelets (restored)")
	}
	return removed, err
}

// isHarnessProcess guards against killing an unrelated process that reused a
// recorded pid.
func isHarnessProcess(pid int) bool {
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return false
	}
	for _, name := range []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kube-proxy", "containerd", "mcsd"} {
		if strings.Contains(string(cmdline), name) {
			return true
		}
	}
	return false
}
