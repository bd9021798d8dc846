package dockerd

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/mcsd-io/mcsd/test/lib/netns"
	"github.com/mcsd-io/mcsd/test/lib/repo"
)

// runtimeName is the private daemon's default runtime, boundedrunc.
const runtimeName = "bounded"

// Files of a private daemon's state directory.
const (
	socketFile  = "docker.sock"
	pidFile     = "docker.pid"
	initPIDFile = "init.pid"
	logFile     = "dockerd.log"
	dataDir     = "data"
	runtimeFile = "boundedrunc"
)

// nsSetup runs as the init of the daemon's namespaces, before it becomes
// docker-init: a /proc of its PID namespace, a private /run (dockerd's
// exec root, containerd's state and the shims' sockets under
// /run/containerd, all gone with the namespace), a complete set of cgroup
// hierarchies (cgroups.go) and the loopback up, on which published ports
// listen.
const nsSetup = `set -e
mount -t proc proc /proc
mount -t tmpfs -o mode=0755 tmpfs /run
` + cgroupsSetup + `ip link set lo up
exec "$@"`

// daemon is a private dockerd and its namespaces.
type daemon struct {
	dir    string
	runID  string
	cmd    *exec.Cmd
	exited chan struct{}
}

// Start starts a private dockerd, as the package comment describes, and
// waits until it answers. It cleans the leftovers of killed runs first.
// Needs root, dockerd and docker-init (Debian's docker.io), ip, and the Go
// toolchain (boundedrunc is built from this repository).
func Start(ctx context.Context) (*Engine, error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("starting a private dockerd needs root")
	}
	if _, err := CleanStale(); err != nil {
		return nil, fmt.Errorf("cleaning leftovers of earlier private dockerds: %w", err)
	}
	bins := map[string]string{}
	for _, name := range []string{"dockerd", "docker-init", "runc", "ip"} {
		path, err := exec.LookPath(name)
		if err != nil {
			return nil, fmt.Errorf("a private dockerd needs %s on PATH (apt-get install docker.io): %w", name, err)
		}
		bins[name] = path
	}
	runID := newRunID()
	d := &daemon{dir: filepath.Join(StateBase(), runID), runID: runID, exited: make(chan struct{})}
	if err := os.MkdirAll(filepath.Join(d.dir, dataDir), 0o700); err != nil {
		return nil, err
	}
	e, err := d.start(ctx, bins)
	if err != nil {
		return nil, errors.Join(err, d.stop())
	}
	return e, nil
}

func (d *daemon) start(ctx context.Context, bins map[string]string) (*Engine, error) {
	runtime := filepath.Join(d.dir, runtimeFile)
	if err := buildRuntime(ctx, runtime); err != nil {
		return nil, err
	}
	log, err := os.Create(filepath.Join(d.dir, logFile))
	if err != nil {
		return nil, err
	}
	defer log.Close()
	socket := filepath.Join(d.dir, socketFile)
	args := []string{"-c", nsSetup, "sh",
		bins["docker-init"], "-s", "--",
		bins["dockerd"],
		"--data-root", filepath.Join(d.dir, dataDir),
		"--exec-root", "/run/docker",
		"--host", "unix://" + socket,
		"--pidfile", filepath.Join(d.dir, pidFile),
		// The namespace's own firewall stays empty too: nothing the
		// tests need is behind a NAT or a published port's DNAT
		// (docker-proxy serves those).
		"--iptables=false", "--ip6tables=false",
		"--cgroup-parent", cgroupParent(d.runID),
		"--add-runtime", runtimeName + "=" + runtime,
		"--default-runtime", runtimeName,
	}
	d.cmd = exec.Command("/bin/sh", args...)
	d.cmd.Stdout, d.cmd.Stderr = log, log
	missing, err := unmountedHierarchies()
	if err != nil {
		return nil, fmt.Errorf("finding the cgroup hierarchies the machine leaves unmounted: %w", err)
	}
	d.cmd.Env = append(os.Environ(), "RUNC="+bins["runc"], "MCSD_CGROUP_MISSING="+strings.Join(missing, " "))
	d.cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags: syscall.CLONE_NEWPID | syscall.CLONE_NEWNET,
		// Go makes every mount of the new mount namespace private.
		Unshareflags: syscall.CLONE_NEWNS,
		Pdeathsig:    syscall.SIGKILL,
	}
	if err := d.cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting dockerd: %w", err)
	}
	go func() {
		_ = d.cmd.Wait()
		close(d.exited)
	}()
	pid := d.cmd.Process.Pid
	if err := os.WriteFile(filepath.Join(d.dir, initPIDFile), []byte(strconv.Itoa(pid)), 0o644); err != nil {
		return nil, err
	}
	if err := d.waitReady(ctx, socket); err != nil {
		return nil, err
	}
	return &Engine{
		Host:   "unix://" + socket,
		NetNS:  netns.At(fmt.Sprintf("/proc/%d/ns/net", pid)),
		daemon: d,
	}, nil
}

// waitReady waits until dockerd answers on socket, or fails when it exits.
func (d *daemon) waitReady(ctx context.Context, socket string) error {
	client := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var dialer net.Dialer
			return dialer.DialContext(ctx, "unix", socket)
		},
	}}
	err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		select {
		case <-d.exited:
			return false, errors.New("dockerd exited")
		default:
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://docker/_ping", nil)
		if err != nil {
			return false, err
		}
		resp, err := client.Do(req)
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		return fmt.Errorf("dockerd never answered on %s: %w\n%s", socket, err, d.logTail())
	}
	return nil
}

// stop kills the namespaces' init, which takes every process of the daemon
// with it, then removes the cgroups and the state directory.
func (d *daemon) stop() error {
	if d.cmd != nil && d.cmd.Process != nil {
		_ = d.cmd.Process.Kill()
		// The init's exit is reaped only after every other process of
		// its PID namespace has exited.
		<-d.exited
	}
	return removeRun(d.runID)
}

// logTail is the end of dockerd's log, for error messages: the state
// directory that holds the log is removed when a start fails.
func (d *daemon) logTail() string {
	data, _ := os.ReadFile(filepath.Join(d.dir, logFile))
	const most = 4 << 10
	if len(data) > most {
		data = data[len(data)-most:]
	}
	return string(data)
}

// buildRuntime compiles test/cmd/boundedrunc into out.
func buildRuntime(ctx context.Context, out string) error {
	root, err := repo.Root()
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", out, "./test/cmd/boundedrunc")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if msg, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("building test/cmd/boundedrunc: %w\n%s", err, msg)
	}
	return nil
}
