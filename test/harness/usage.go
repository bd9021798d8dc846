package harness

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Memory is what a process of the run holds: its resident set now and at
// its peak, in bytes (0 when unknown).
type Memory struct {
	RSS, PeakRSS int64
}

func (p *process) memory() Memory {
	p.mu.Lock()
	cmd := p.cmd
	p.mu.Unlock()
	if cmd == nil || cmd.Process == nil {
		return Memory{}
	}
	return memoryOf(cmd.Process.Pid)
}

// memoryOf reads VmRSS and VmHWM of pid from /proc.
func memoryOf(pid int) Memory {
	data, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		return Memory{}
	}
	var m Memory
	for _, line := range strings.Split(string(data), "\n") {
		key, value, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(value), " kB"), 10, 64)
		if err != nil {
			continue
		}
		switch key {
		case "VmRSS":
			m.RSS = kb * 1024
		case "VmHWM":
			m.PeakRSS = kb * 1024
		}
	}
	return m
}

// Memory is the program's memory.
func (pr *Program) Memory() Memory { return pr.p.memory() }

// APIServerMemory is the memory of the cluster's kube-apiserver.
func (c *Cluster) APIServerMemory() Memory { return c.apiserver.memory() }

// EtcdMemory is the memory of the cluster's etcd.
func (c *Cluster) EtcdMemory() Memory { return c.etcd.memory() }

// EtcdDBSize is the size of the cluster's etcd database file in bytes: what
// its objects take on disk before compaction and defragmentation.
func (c *Cluster) EtcdDBSize() int64 {
	fi, err := os.Stat(filepath.Join(c.dir, "etcd", "member", "snap", "db"))
	if err != nil {
		return 0
	}
	return fi.Size()
}
