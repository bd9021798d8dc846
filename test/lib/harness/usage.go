package harness

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Usage is what a process of the run holds and has used: its resident set
// now and at its peak, in bytes, and the CPU time it has had (0 when
// unknown).
type Usage struct {
	RSS, PeakRSS int64
	CPU          time.Duration
}

func (p *process) usage() Usage {
	p.mu.Lock()
	cmd := p.cmd
	p.mu.Unlock()
	if cmd == nil || cmd.Process == nil {
		return Usage{}
	}
	return UsageOf(cmd.Process.Pid)
}

// clockTicks is USER_HZ, the unit of CPU times in /proc/<pid>/stat: 100 on
// every Linux architecture Go supports.
const clockTicks = 100

// UsageOf reads VmRSS and VmHWM of pid from /proc/<pid>/status, and its
// user and system time from /proc/<pid>/stat.
func UsageOf(pid int) Usage {
	dir := filepath.Join("/proc", strconv.Itoa(pid))
	var m Usage
	if stat, err := os.ReadFile(filepath.Join(dir, "stat")); err == nil {
		// The command name may hold spaces: fields count from its ")".
		if i := strings.LastIndexByte(string(stat), ')'); i >= 0 {
			fields := strings.Fields(string(stat[i+1:]))
			if len(fields) > 13 {
				utime, _ := strconv.ParseInt(fields[11], 10, 64)
				stime, _ := strconv.ParseInt(fields[12], 10, 64)
				m.CPU = time.Duration(utime+stime) * time.Second / clockTicks
			}
		}
	}
	data, err := os.ReadFile(filepath.Join(dir, "status"))
	if err != nil {
		return m
	}
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

// Usage is the program's usage.
func (pr *Program) Usage() Usage { return pr.p.usage() }

// APIServerUsage is the usage of the cluster's kube-apiserver.
func (c *Cluster) APIServerUsage() Usage { return c.apiserver.usage() }

// EtcdUsage is the usage of the cluster's etcd.
func (c *Cluster) EtcdUsage() Usage { return c.etcd.usage() }

// EtcdDBSize is the size of the cluster's etcd database file in bytes: what
// its objects take on disk before compaction and defragmentation.
func (c *Cluster) EtcdDBSize() int64 {
	fi, err := os.Stat(filepath.Join(c.dir, "etcd", "member", "snap", "db"))
	if err != nil {
		return 0
	}
	return fi.Size()
}
