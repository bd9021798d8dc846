package harness

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/mcsd-io/mcsd/test/lib/cgroup"
)

// Real nodes run their daemons and pods in cgroups of the run, in every
// cgroup hierarchy (cgroup v1 controllers, the named systemd one, and the
// unified one):
//
//	<hierarchy>/mcsd-harness/<run id>/<node>/daemons   containerd (and so its shims), kubelet, kube-proxy
//	<hierarchy>/mcsd-harness/<run id>/<node>/pods      the kubelet's cgroupRoot: every container
//
// Nothing else on the machine lives there, so a run's processes are exactly
// the members of its subtree: teardown, and the next start after a killed
// run, kill them all (container processes and runc shims outlive a killed
// containerd) and remove the directories, whatever the owner left.
const (
	cgroupBase  = "/sys/fs/cgroup"
	cgroupGroup = "mcsd-harness"
)

// kubeletHierarchies are the hierarchies in which the kubelet wants its
// cgroupRoot to exist before it starts; it makes what it needs below it
// itself. The unified hierarchy is absent on a pure cgroup v1 machine.
var kubeletHierarchies = []string{"cpu", "cpuacct", "cpuset", "memory", "pids", "systemd"}

// trackHierarchy is the hierarchy whose membership says which processes a
// run owns: every process is in exactly one of its cgroups, and containers
// get one there as in every hierarchy.
const trackHierarchy = "pids"

// hierarchies lists the mounted cgroup hierarchies by directory name.
func hierarchies() ([]string, error) {
	entries, err := os.ReadDir(cgroupBase)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", cgroupBase, err)
	}
	var out []string
	for _, e := range entries {
		if e.IsDir() {
			if _, err := os.Stat(filepath.Join(cgroupBase, e.Name(), "cgroup.procs")); err == nil {
				out = append(out, e.Name())
			}
		}
	}
	return out, nil
}

// runCgroup is the path of a run's cgroup below a hierarchy's root.
func runCgroup(runID string) string { return "/" + cgroupGroup + "/" + runID }

// makeCgroup creates rel in each of the given hierarchies. In cpuset, each
// new level gets its parent's cpus and mems, without which no process may
// join it. The group's directory is shared by runs and removed by the last
// one to end, so a creation that loses that race is tried again.
func makeCgroup(rel string, hs []string) error {
	var err error
	for range 5 {
		if err = makeCgroupOnce(rel, hs); !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return err
}

func makeCgroupOnce(rel string, hs []string) error {
	for _, h := range hs {
		root := filepath.Join(cgroupBase, h)
		if _, err := os.Stat(root); err != nil {
			if h == "systemd" || h == "unified" {
				continue
			}
			return fmt.Errorf("cgroup hierarchy %s is not mounted: %w", root, err)
		}
		dir := root
		for _, part := range strings.Split(strings.Trim(rel, "/"), "/") {
			parent := dir
			dir = filepath.Join(dir, part)
			if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
				return fmt.Errorf("creating cgroup %s: %w", dir, err)
			}
			if h != "cpuset" {
				continue
			}
			for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
				cur, _ := os.ReadFile(filepath.Join(dir, f))
				if strings.TrimSpace(string(cur)) != "" {
					continue
				}
				v, err := os.ReadFile(filepath.Join(parent, f))
				if err != nil {
					return err
				}
				if err := os.WriteFile(filepath.Join(dir, f), v, 0o644); err != nil {
					return fmt.Errorf("writing %s of %s: %w", f, dir, err)
				}
			}
		}
	}
	return nil
}

// nodeCPUShares is the CPU weight (cgroup v1 cpu.shares) of one real
// node's pods: what the kubelet gives kubepods on a machine of this many
// CPUs, 1024 per CPU, against the 1024 of a busy process. A node's cgroup
// and its pods cgroup weigh that much, and the run's and the group's that
// much per node of the run: with the default weight at every level, every
// pod of every node would share the CPU time of one busy process of the
// machine, and a loaded machine would starve them all.
func nodeCPUShares() int { return 1024 * runtime.NumCPU() }

// weighCPU sets the CPU weight of rel, which must exist, where the cpu
// controller is mounted as cgroup v1's.
func weighCPU(rel string, shares int) error {
	file := filepath.Join(cgroupBase, "cpu", rel, "cpu.shares")
	if _, err := os.Stat(filepath.Join(cgroupBase, "cpu", "cpu.shares")); err != nil {
		return nil
	}
	if err := os.WriteFile(file, []byte(strconv.Itoa(shares)), 0o644); err != nil {
		return fmt.Errorf("weighing cgroup %s: %w", filepath.Dir(file), err)
	}
	return nil
}

// procsFiles are the cgroup.procs files of rel in each hierarchy a process
// is put into to be tracked.
func procsFiles(rel string) []string {
	var out []string
	for _, h := range []string{trackHierarchy, "systemd"} {
		if _, err := os.Stat(filepath.Join(cgroupBase, h)); err == nil {
			out = append(out, filepath.Join(cgroupBase, h, rel, "cgroup.procs"))
		}
	}
	return out
}

// killCgroup kills every process in rel and its descendants (by the
// tracking hierarchy) until none is left, then removes rel's directories,
// deepest first, from every hierarchy. It returns the pids it killed.
func killCgroup(rel string) ([]int, error) {
	var killed []int
	tree := filepath.Join(cgroupBase, trackHierarchy, rel)
	deadline := time.Now().Add(30 * time.Second)
	for {
		pids, err := cgroupPids(tree)
		if err != nil {
			return killed, err
		}
		if len(pids) == 0 {
			break
		}
		if time.Now().After(deadline) {
			return killed, fmt.Errorf("processes %v of cgroup %s survive SIGKILL", pids, tree)
		}
		for _, pid := range pids {
			if err := syscall.Kill(pid, syscall.SIGKILL); err == nil && !slices.Contains(killed, pid) {
				killed = append(killed, pid)
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	hs, err := hierarchies()
	if err != nil {
		return killed, err
	}
	var errs []error
	for _, h := range hs {
		if err := cgroup.RemoveTree(filepath.Join(cgroupBase, h, rel), deadline); err != nil {
			errs = append(errs, err)
		}
	}
	return killed, errors.Join(errs...)
}

// cgroupPids lists the processes of a cgroup and its descendants.
func cgroupPids(tree string) ([]int, error) {
	var pids []int
	err := filepath.WalkDir(tree, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if !d.IsDir() {
			return nil
		}
		data, err := os.ReadFile(filepath.Join(path, "cgroup.procs"))
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		for _, f := range strings.Fields(string(data)) {
			if pid, err := strconv.Atoi(f); err == nil {
				pids = append(pids, pid)
			}
		}
		return nil
	})
	return pids, err
}

// staleCgroups kills the processes of, and removes, the cgroups of runs
// whose owner is gone. The group's own directory stays: another run may
// be using it.
func staleCgroups() ([]string, error) {
	entries, err := os.ReadDir(filepath.Join(cgroupBase, trackHierarchy, cgroupGroup))
	if errors.Is(err, fs.ErrNotExist) {
		entries = nil
	} else if err != nil {
		return nil, err
	}
	runs := map[string]bool{}
	for _, e := range entries {
		runs[e.Name()] = true
	}
	// A hierarchy may hold a run's directory that the tracking one lost.
	hs, err := hierarchies()
	if err != nil {
		return nil, err
	}
	for _, h := range hs {
		more, _ := os.ReadDir(filepath.Join(cgroupBase, h, cgroupGroup))
		for _, e := range more {
			runs[e.Name()] = true
		}
	}
	var removed []string
	var errs []error
	defer removeCgroupGroup()
	for run := range runs {
		pid, ok := OwnerPID(run)
		if !ok || alive(pid) {
			continue
		}
		killed, err := killCgroup(runCgroup(run))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, fmt.Sprintf("cgroups of run %s (%d processes killed)", run, len(killed)))
	}
	return removed, errors.Join(errs...)
}

// removeCgroupGroup removes the group's directory from every hierarchy
// where no run has a cgroup left; a busy one is left to its last run.
func removeCgroupGroup() {
	hs, err := hierarchies()
	if err != nil {
		return
	}
	for _, h := range hs {
		_ = syscall.Rmdir(filepath.Join(cgroupBase, h, cgroupGroup))
	}
}
