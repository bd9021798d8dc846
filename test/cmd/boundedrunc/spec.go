package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
)

// capabilityNames are Linux's capabilities by number (linux/capability.h),
// as OCI specs name them.
var capabilityNames = []string{
	"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_DAC_READ_SEARCH", "CAP_FOWNER", "CAP_FSETID",
	"CAP_KILL", "CAP_SETGID", "CAP_SETUID", "CAP_SETPCAP", "CAP_LINUX_IMMUTABLE",
	"CAP_NET_BIND_SERVICE", "CAP_NET_BROADCAST", "CAP_NET_ADMIN", "CAP_NET_RAW", "CAP_IPC_LOCK",
	"CAP_IPC_OWNER", "CAP_SYS_MODULE", "CAP_SYS_RAWIO", "CAP_SYS_CHROOT", "CAP_SYS_PTRACE",
	"CAP_SYS_PACCT", "CAP_SYS_ADMIN", "CAP_SYS_BOOT", "CAP_SYS_NICE", "CAP_SYS_RESOURCE",
	"CAP_SYS_TIME", "CAP_SYS_TTY_CONFIG", "CAP_MKNOD", "CAP_LEASE", "CAP_AUDIT_WRITE",
	"CAP_AUDIT_CONTROL", "CAP_SETFCAP", "CAP_MAC_OVERRIDE", "CAP_MAC_ADMIN", "CAP_SYSLOG",
	"CAP_WAKE_ALARM", "CAP_BLOCK_SUSPEND", "CAP_AUDIT_READ", "CAP_PERFMON", "CAP_BPF",
	"CAP_CHECKPOINT_RESTORE",
}

// boundingSet returns the names of the capabilities in this process's
// bounding set, which no process it starts can exceed.
func boundingSet() (map[string]bool, error) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		hex, ok := strings.CutPrefix(s.Text(), "CapBnd:")
		if !ok {
			continue
		}
		mask, err := strconv.ParseUint(strings.TrimSpace(hex), 16, 64)
		if err != nil {
			return nil, fmt.Errorf("reading CapBnd of /proc/self/status: %w", err)
		}
		return capabilitySet(mask), nil
	}
	if err := s.Err(); err != nil {
		return nil, err
	}
	return nil, fmt.Errorf("no CapBnd in /proc/self/status")
}

func capabilitySet(mask uint64) map[string]bool {
	set := map[string]bool{}
	for i, name := range capabilityNames {
		if mask&(1<<i) != 0 {
			set[name] = true
		}
	}
	return set
}

// boundSpecFile removes the capabilities outside bounding from the spec in
// path: a container spec's process, or a process spec (processOnly). The
// file is rewritten only when that removed something; every other field
// stays as it was, numbers included.
func boundSpecFile(path string, processOnly bool, bounding map[string]bool) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var spec map[string]any
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(&spec); err != nil {
		return fmt.Errorf("reading spec %s: %w", path, err)
	}
	process := spec
	if !processOnly {
		p, ok := spec["process"].(map[string]any)
		if !ok {
			return nil
		}
		process = p
	}
	if !boundCapabilities(process, bounding) {
		return nil
	}
	out, err := json.Marshal(spec)
	if err != nil {
		return err
	}
	st, err := os.Stat(path)
	if err != nil {
		return err
	}
	return os.WriteFile(path, out, st.Mode().Perm())
}

// boundCapabilities removes from every capability set of an OCI process
// the known capabilities outside bounding, and says whether it removed any.
// Names it does not know are left to runc.
func boundCapabilities(process map[string]any, bounding map[string]bool) bool {
	caps, ok := process["capabilities"].(map[string]any)
	if !ok {
		return false
	}
	changed := false
	for set, v := range caps {
		names, ok := v.([]any)
		if !ok {
			continue
		}
		kept := slices.DeleteFunc(slices.Clone(names), func(n any) bool {
			s, ok := n.(string)
			return ok && slices.Contains(capabilityNames, s) && !bounding[s]
		})
		if len(kept) != len(names) {
			caps[set] = kept
			changed = true
		}
	}
	return changed
}
