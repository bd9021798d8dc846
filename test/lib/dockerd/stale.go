package dockerd

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/mcsd-io/mcsd/test/lib/cgroup"
)

// Every private daemon is a run <pid>x<seq> of the process that started
// it: its state directory is StateBase()/<run> and its containers' cgroups
// are mcsd-dockerd/<run> in every hierarchy. The owner's pid in the name
// tells a later run the leftovers of a dead owner from a live one's.
const cgroupGroup = "mcsd-dockerd"

const cgroupBase = "/sys/fs/cgroup"

var runSeq atomic.Int64

func newRunID() string { return fmt.Sprintf("%dx%d", os.Getpid(), runSeq.Add(1)) }

// StateBase is the directory that holds the private daemons' state
// directories: $MCSD_DOCKERD_DIR, else mcsd-dockerd in the temporary
// directory. Images are large: it is on disk, not in /dev/shm.
func StateBase() string {
	if base := os.Getenv("MCSD_DOCKERD_DIR"); base != "" {
		return base
	}
	return filepath.Join(os.TempDir(), "mcsd-dockerd")
}

// cgroupParent is the cgroup of a run's containers, below each
// hierarchy's root.
func cgroupParent(runID string) string { return "/" + cgroupGroup + "/" + runID }

// ownerAlive reports whether the process that started a run lives.
func ownerAlive(runID string) bool {
	pid, err := strconv.Atoi(strings.SplitN(runID, "x", 2)[0])
	if err != nil {
		return true // not a run's name: not ours to remove
	}
	err = syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// CleanStale removes what private daemons of dead owners left: their
// namespaces' init should it live on (it dies with its owner unless the
// parent-death signal was lost), their cgroups and their state
// directories. Daemons of live owners are untouched. It returns what it
// removed, for logs.
func CleanStale() ([]string, error) {
	runs := map[string]bool{}
	entries, err := os.ReadDir(StateBase())
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	for _, e := range entries {
		runs[e.Name()] = true
	}
	err = eachHierarchy(func(root string) error {
		groups, _ := filepath.Glob(filepath.Join(root, cgroupGroup, "*"))
		for _, g := range groups {
			runs[filepath.Base(g)] = true
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	var removed []string
	var errs []error
	for run := range runs {
		if ownerAlive(run) {
			continue
		}
		if err := killInit(filepath.Join(StateBase(), run, initPIDFile)); err != nil {
			errs = append(errs, err)
			continue
		}
		if err := removeRun(run); err != nil {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, "private dockerd run "+run)
	}
	return removed, errors.Join(errs...)
}

// killInit kills the namespaces' init recorded in file, if it still runs
// docker-init, and waits until it is gone: then so is every process of
// its daemon.
func killInit(file string) error {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		return nil
	}
	deadline := time.Now().Add(time.Minute)
	for {
		cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil || !strings.Contains(string(cmdline), "docker-init") {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the init %d of a dead owner's dockerd survives SIGKILL", pid)
		}
		_ = syscall.Kill(pid, syscall.SIGKILL)
		time.Sleep(50 * time.Millisecond)
	}
}

// eachHierarchy calls visit with the root of every cgroup hierarchy a
// private daemon's containers may have cgroups in: the machine's, and
// those only the daemons mount (cgroups.go).
func eachHierarchy(visit func(root string) error) error {
	var errs []error
	roots, _ := filepath.Glob(filepath.Join(cgroupBase, "*"))
	for _, root := range roots {
		errs = append(errs, visit(root))
	}
	errs = append(errs, visitUnmountedHierarchies(visit))
	return errors.Join(errs...)
}

// removeRun removes a run's cgroups and state directory. Its processes
// must be gone.
func removeRun(runID string) error {
	errs := []error{eachHierarchy(func(root string) error {
		group := filepath.Join(root, cgroupGroup)
		if _, err := os.Stat(group); err != nil {
			return nil
		}
		err := cgroup.RemoveTree(filepath.Join(group, runID), time.Now().Add(30*time.Second))
		// The group's directory goes with its last run.
		_ = syscall.Rmdir(group)
		return err
	})}
	if err := os.RemoveAll(filepath.Join(StateBase(), runID)); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
