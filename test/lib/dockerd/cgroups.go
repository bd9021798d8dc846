package dockerd

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
)

// A kubelet on cgroup v1 (a kind node's) needs every controller the kernel
// has mounted in its container, and runc mounts in a container only the
// hierarchies mounted where runc runs. Some machines leave controllers the
// kernel has (/proc/cgroups) unmounted: hugetlb, net_cls, net_prio and
// perf_event. The private daemon's mount namespace therefore gets a
// /sys/fs/cgroup of its own: a tmpfs with the machine's hierarchies bound
// in, and the missing ones mounted beside them (net_cls and net_prio
// together, with the symlinks of that combined name that systemd makes).
// The machine's /sys/fs/cgroup is not touched; the hierarchies mounted in
// the namespace vanish with it, once their cgroups are removed
// (unmountedHierarchies' visit does that).

// cgroupsSetup is the part of nsSetup that builds the namespace's
// /sys/fs/cgroup when $MCSD_CGROUP_MISSING names hierarchies to add, one
// comma-separated controller set a word.
const cgroupsSetup = `if [ -n "$MCSD_CGROUP_MISSING" ]; then
  mkdir /run/machine-cgroup
  mount --rbind /sys/fs/cgroup /run/machine-cgroup
  mount -t tmpfs -o mode=0755 cgroup /sys/fs/cgroup
  for d in /run/machine-cgroup/*; do
    n=${d##*/}
    if [ -L "$d" ]; then cp -P "$d" /sys/fs/cgroup/; continue; fi
    mountpoint -q "$d" || continue
    mkdir "/sys/fs/cgroup/$n"
    mount --rbind "$d" "/sys/fs/cgroup/$n"
  done
  for set in $MCSD_CGROUP_MISSING; do
    mkdir "/sys/fs/cgroup/$set"
    mount -t cgroup -o "$set" cgroup "/sys/fs/cgroup/$set"
    for c in $(echo "$set" | tr , ' '); do
      [ "$c" = "$set" ] || ln -s "$set" "/sys/fs/cgroup/$c"
    done
  done
  umount -R /run/machine-cgroup
  rmdir /run/machine-cgroup
fi
`

// unmountedHierarchies returns the cgroup v1 controller sets the kernel
// enables but the machine has not mounted, as mount options
// ("net_cls,net_prio", "perf_event"); none on a machine with cgroup v2
// alone, where there are no v1 hierarchies to complete.
func unmountedHierarchies() ([]string, error) {
	mounted, anyV1, err := mountedControllers()
	if err != nil {
		return nil, err
	}
	if !anyV1 {
		return nil, nil
	}
	f, err := os.Open("/proc/cgroups")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	missing := map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) != 4 || strings.HasPrefix(fields[0], "#") || fields[3] != "1" {
			continue
		}
		if !mounted[fields[0]] {
			missing[fields[0]] = true
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	var sets []string
	// net_cls and net_prio share a hierarchy wherever systemd mounts them.
	if missing["net_cls"] && missing["net_prio"] {
		sets = append(sets, "net_cls,net_prio")
		delete(missing, "net_cls")
		delete(missing, "net_prio")
	}
	for c := range missing {
		sets = append(sets, c)
	}
	slices.Sort(sets)
	return sets, nil
}

// mountedControllers returns the v1 controllers mounted in this mount
// namespace, and whether any v1 hierarchy is.
func mountedControllers() (map[string]bool, bool, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, false, err
	}
	defer f.Close()
	mounted := map[string]bool{}
	anyV1 := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// ... - fstype source superoptions
		_, after, ok := strings.Cut(sc.Text(), " - ")
		if !ok {
			continue
		}
		fields := strings.Fields(after)
		if len(fields) < 3 || fields[0] != "cgroup" {
			continue
		}
		anyV1 = true
		for _, opt := range strings.Split(fields[2], ",") {
			mounted[opt] = true
		}
	}
	return mounted, anyV1, sc.Err()
}

// visitUnmountedHierarchies mounts each hierarchy the machine leaves
// unmounted on a temporary directory, calls visit with it, and unmounts
// it again: the cgroups a private daemon's containers made there are
// reachable only so. A hierarchy no mount namespace holds and without
// cgroups below its root is freed by the kernel at the unmount.
func visitUnmountedHierarchies(visit func(root string) error) error {
	sets, err := unmountedHierarchies()
	if err != nil || len(sets) == 0 {
		return err
	}
	tmp, err := os.MkdirTemp("", "mcsd-dockerd-cgroup-")
	if err != nil {
		return err
	}
	defer os.Remove(tmp)
	var errs []error
	for _, set := range sets {
		dir := filepath.Join(tmp, set)
		if err := os.Mkdir(dir, 0o755); err != nil {
			errs = append(errs, err)
			continue
		}
		if err := syscall.Mount("cgroup", dir, "cgroup", 0, set); err != nil {
			errs = append(errs, fmt.Errorf("mounting the %s cgroup hierarchy: %w", set, err))
			_ = os.Remove(dir)
			continue
		}
		errs = append(errs, visit(dir))
		if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil {
			errs = append(errs, fmt.Errorf("unmounting the %s cgroup hierarchy: %w", set, err))
			continue
		}
		_ = os.Remove(dir)
	}
	return errors.Join(errs...)
}
