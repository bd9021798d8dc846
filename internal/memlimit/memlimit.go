// Package memlimit sets the Go runtime's soft memory limit from the memory
// limit of the container mcsd runs in. Without it the runtime lets the
// heap grow to twice its live data between collections whatever the
// limit, so a burst (an informer's relist of tens of thousands of objects)
// can take the process over its limit although the live data fits.
package memlimit

import (
	"bufio"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
)

// Share is the part of the container's limit given to the Go runtime;
// the rest is for what it does not count (thread stacks, mappings).
const Share = 0.9

// unlimited: cgroup v1 reports no limit as a page-aligned MaxInt64.
const unlimited = 1 << 60

// Source says where a limit came from, for the log.
type Source string

const (
	// FromEnvironment: GOMEMLIMIT was set; the runtime applied it already.
	FromEnvironment Source = "GOMEMLIMIT"
	// FromCgroup: the container's cgroup memory limit.
	FromCgroup Source = "cgroup"
	// FromDownwardAPI: the MCSD_MEMORY_LIMIT environment variable, such
	// as the downward API's limits.memory of the container.
	FromDownwardAPI Source = "MCSD_MEMORY_LIMIT"
	// None: no limit known; the runtime's default (none) stays.
	None Source = ""
)

// Set applies Share of the container's memory limit as the runtime's soft
// limit unless GOMEMLIMIT is set, and returns the limit in force (0: none)
// and where it came from. root is the cgroup filesystem ("/sys/fs/cgroup").
func Set(root string) (int64, Source, error) {
	if _, ok := os.LookupEnv("GOMEMLIMIT"); ok {
		return debug.SetMemoryLimit(-1), FromEnvironment, nil
	}
	limit, source, err := containerLimit(root)
	if err != nil || limit <= 0 {
		return 0, None, err
	}
	soft := int64(float64(limit) * Share)
	debug.SetMemoryLimit(soft)
	return soft, source, nil
}

// containerLimit is the memory limit of the process's cgroup (v2 or v1),
// else MCSD_MEMORY_LIMIT in bytes, else 0.
func containerLimit(root string) (int64, Source, error) {
	if limit := cgroupLimit(root, "/proc/self/cgroup"); limit > 0 {
		return limit, FromCgroup, nil
	}
	if v := os.Getenv("MCSD_MEMORY_LIMIT"); v != "" {
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil || n < 0 {
			return 0, None, fmt.Errorf("MCSD_MEMORY_LIMIT=%q is not a number of bytes; set it from the container's limits.memory (downward API, divisor 1)", v)
		}
		return n, FromDownwardAPI, nil
	}
	return 0, None, nil
}

// cgroupLimit reads the memory limit of the cgroup that selfCgroup (the
// format of /proc/self/cgroup) names: memory.max in the unified hierarchy,
// memory.limit_in_bytes in v1's memory controller. Inside a container's
// cgroup namespace the path is "/", its own cgroup. 0 means no limit
// (or none readable).
func cgroupLimit(root, selfCgroup string) int64 {
	f, err := os.Open(selfCgroup)
	if err != nil {
		return 0 // not Linux, or no procfs: no limit known
	}
	defer f.Close()
	var candidates []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		switch {
		case parts[0] == "0" && parts[1] == "":
			candidates = append(candidates, filepath.Join(root, parts[2], "memory.max"), filepath.Join(root, "unified", parts[2], "memory.max"))
		case hasController(parts[1], "memory"):
			candidates = append(candidates, filepath.Join(root, "memory", parts[2], "memory.limit_in_bytes"))
		}
	}
	for _, path := range candidates {
		data, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		v := strings.TrimSpace(string(data))
		if v == "max" {
			continue
		}
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil || n >= unlimited || n > math.MaxInt64 {
			continue
		}
		return int64(n)
	}
	return 0
}

// hasController reports whether the comma-separated list of v1 controllers holds c.
func hasController(controllers, c string) bool {
	for _, x := range strings.Split(controllers, ",") {
		if x == c {
			return true
		}
	}
	return false
}
