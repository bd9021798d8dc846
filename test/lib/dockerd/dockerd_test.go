package dockerd_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/mcsd-io/mcsd/internal/image/mcsdimage"
	"github.com/mcsd-io/mcsd/test/lib/dockerd"
	"github.com/mcsd-io/mcsd/test/lib/repo"
	"github.com/mcsd-io/mcsd/test/lib/testenv"
)

// testImage is what the tests' containers run: mcsd's Debian base, which
// has a shell, mount and grep.
const testImage = "localhost/mcsd-dockerd-test:base"

// A private dockerd runs privileged containers on this machine, whose
// bounding set may lack capabilities a privileged spec asks for: a
// container started with --privileged, and a process exec'd into it, get
// every capability the machine has, mount filesystems and have an address
// on the daemon's bridge. Stopping it leaves no process, network or mount
// namespace, cgroup, state directory or host mount behind.
func TestPrivateDaemonRunsPrivilegedContainersAndLeavesNothing(t *testing.T) {
	requirePrivateDaemon(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	bounding := capabilities(t, "/proc/self/status", "CapBnd")
	hostRun := existing("/run/docker", "/run/containerd")

	began := time.Now()
	e, err := dockerd.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("private dockerd answered after %v", time.Since(began).Round(time.Millisecond))
	stopped := false
	defer func() {
		if !stopped {
			_ = e.Stop()
		}
	}()
	namespaces := namespacesOf(t, e.PID())
	runID := filepath.Base(e.StateDir())
	importBase(ctx, t, e)

	began = time.Now()
	out, err := e.Docker(ctx, "run", "--rm", "--privileged", testImage, "sh", "-c",
		"grep CapEff /proc/self/status && mount -t tmpfs probe /mnt && grep ' /mnt ' /proc/mounts && cat /proc/self/cgroup")
	if err != nil {
		t.Fatalf("a privileged container did not run: %v\ndockerd's log:\n%s", err, logOf(e))
	}
	t.Logf("a privileged container ran in %v:\n%s", time.Since(began).Round(time.Millisecond), out)
	checkPrivileged(t, "the privileged container", capabilitiesIn(t, out, "CapEff"), bounding)
	if !strings.Contains(out, "probe /mnt tmpfs") {
		t.Errorf("the privileged container could not mount a tmpfs:\n%s", out)
	}
	// A kubelet in a container (a kind node's) needs every controller the
	// kernel has, mounted or not on the machine.
	for _, c := range enabledControllers(t) {
		if !regexp.MustCompile(`(?m)^\d+:([a-z_]+,)*` + c + `(,[a-z_]+)*:/`).MatchString(out) {
			t.Errorf("the container is in no %s cgroup:\n%s", c, out)
		}
	}

	if _, err := e.Docker(ctx, "run", "-d", "--privileged", "--name", "resident", testImage, "sleep", "infinity"); err != nil {
		t.Fatal(err)
	}
	out, err = e.Docker(ctx, "exec", "--privileged", "resident", "grep", "CapEff", "/proc/self/status")
	if err != nil {
		t.Fatalf("exec into a privileged container: %v\ndockerd's log:\n%s", err, logOf(e))
	}
	checkPrivileged(t, "a process exec'd into the privileged container", capabilitiesIn(t, out, "CapEff"), bounding)
	ip, err := e.Docker(ctx, "inspect", "--format", "{{.NetworkSettings.IPAddress}}", "resident")
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(ip) == "" {
		t.Error("the container has no address on the daemon's bridge")
	}
	if cgroups := cgroupsOf(runID); len(cgroups) == 0 {
		t.Fatalf("no cgroup of the run %s holds the container: the test would not show that Stop removes them", runID)
	}

	began = time.Now()
	stopped = true
	if err := e.Stop(); err != nil {
		t.Fatal(err)
	}
	t.Logf("stopped and removed in %v", time.Since(began).Round(time.Millisecond))
	assertNothingLeft(t, namespaces, e.StateDir(), runID, hostRun)
}

// A private daemon whose owner is killed dies with it, containers and
// all; what it leaves on disk (its state directory and cgroups) is
// removed by the next start.
func TestPrivateDaemonOfAKilledOwnerIsCleanedOnTheNextStart(t *testing.T) {
	requirePrivateDaemon(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	hostRun := existing("/run/docker", "/run/containerd")

	owner := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestHelperOwnerOfAPrivateDaemon$", "-test.v")
	owner.Env = append(os.Environ(), "MCSD_DOCKERD_OWNER=1")
	owner.Stderr = os.Stderr
	if _, err := owner.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := owner.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := owner.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = owner.Process.Kill() }()
	var stateDir string
	var pid int
	lines := bufio.NewScanner(stdout)
	for lines.Scan() {
		if _, err := fmt.Sscanf(lines.Text(), "daemon %s %d", &stateDir, &pid); err == nil {
			break
		}
	}
	if pid == 0 {
		_ = owner.Wait()
		t.Fatal("the owner never reported a running container")
	}
	namespaces := namespacesOf(t, pid)
	runID := filepath.Base(stateDir)

	if err := owner.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = owner.Wait()
	err = wait.PollUntilContextCancel(ctx, 50*time.Millisecond, true, func(context.Context) (bool, error) {
		return len(processesIn(namespaces)) == 0, nil
	})
	if err != nil {
		t.Fatalf("processes of the killed owner's daemon live on: %v", processesIn(namespaces))
	}
	if _, err := os.Stat(stateDir); err != nil {
		t.Fatalf("the killed owner left no state directory (%v): the test would not show what cleaning is for", err)
	}
	if len(cgroupsOf(runID)) == 0 {
		t.Fatal("the killed owner left no cgroups: the test would not show what cleaning is for")
	}

	removed, err := dockerd.CleanStale()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("removed: %v", removed)
	assertNothingLeft(t, namespaces, stateDir, runID, hostRun)
}

// TestHelperOwnerOfAPrivateDaemon is the process that
// TestPrivateDaemonOfAKilledOwnerIsCleanedOnTheNextStart kills: it starts a
// private daemon with a privileged container and lives until it is killed.
func TestHelperOwnerOfAPrivateDaemon(t *testing.T) {
	if os.Getenv("MCSD_DOCKERD_OWNER") == "" {
		t.Skip("the process a test kills; run by TestPrivateDaemonOfAKilledOwnerIsCleanedOnTheNextStart")
	}
	ctx := context.Background()
	e, err := dockerd.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	importBase(ctx, t, e)
	if _, err := e.Docker(ctx, "run", "-d", "--privileged", testImage, "sleep", "infinity"); err != nil {
		t.Fatal(err)
	}
	fmt.Printf("daemon %s %d\n", e.StateDir(), e.PID())
	// Until killed; should the test end first, its stdin closes.
	_, _ = io.Copy(io.Discard, os.Stdin)
}

func requirePrivateDaemon(t *testing.T) {
	t.Helper()
	testenv.RequireRoot(t)
	testenv.RequireCommands(t, "dockerd", "docker-init", "docker", "runc", "ip", "go")
}

// importBase loads mcsd's Debian base layer into the engine as testImage.
func importBase(ctx context.Context, t testing.TB, e *dockerd.Engine) {
	t.Helper()
	cache, err := repo.Cache()
	if err != nil {
		t.Fatal(err)
	}
	layer, err := mcsdimage.BaseLayer(ctx, mcsdimage.Options{Cache: cache})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Docker(ctx, "import", layer, testImage); err != nil {
		t.Fatal(err)
	}
}

// namespaces are the inodes of a process's PID and network namespaces.
type namespaces struct{ pid, net string }

func namespacesOf(t *testing.T, pid int) namespaces {
	t.Helper()
	var ns namespaces
	var err error
	if ns.pid, err = os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", pid)); err != nil {
		t.Fatal(err)
	}
	if ns.net, err = os.Readlink(fmt.Sprintf("/proc/%d/ns/net", pid)); err != nil {
		t.Fatal(err)
	}
	return ns
}

// processesIn lists the processes in either namespace.
func processesIn(ns namespaces) []string {
	var found []string
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		pidNS, _ := os.Readlink(filepath.Join("/proc", e.Name(), "ns", "pid"))
		netNS, _ := os.Readlink(filepath.Join("/proc", e.Name(), "ns", "net"))
		if pidNS == ns.pid || netNS == ns.net {
			cmdline, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
			found = append(found, e.Name()+" "+strings.ReplaceAll(string(cmdline), "\x00", " "))
		}
	}
	return found
}

// cgroupsOf lists a run's cgroups in every hierarchy.
func cgroupsOf(runID string) []string {
	found, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup/*/mcsd-dockerd", runID))
	more, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup/*/mcsd-dockerd", runID, "*"))
	return append(found, more...)
}

// enabledControllers are the cgroup v1 controllers the kernel enables.
func enabledControllers(t *testing.T) []string {
	t.Helper()
	data, err := os.ReadFile("/proc/cgroups")
	if err != nil {
		t.Fatal(err)
	}
	var found []string
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) == 4 && !strings.HasPrefix(f[0], "#") && f[3] == "1" {
			found = append(found, f[0])
		}
	}
	return found
}

// existing returns which of the paths exist.
func existing(paths ...string) map[string]bool {
	out := map[string]bool{}
	for _, p := range paths {
		_, err := os.Stat(p)
		out[p] = err == nil
	}
	return out
}

func assertNothingLeft(t *testing.T, ns namespaces, stateDir, runID string, hostRun map[string]bool) {
	t.Helper()
	if left := processesIn(ns); len(left) > 0 {
		t.Errorf("processes of the daemon's namespaces are left: %v", left)
	}
	if _, err := os.Stat(stateDir); !os.IsNotExist(err) {
		t.Errorf("the state directory %s is left (%v)", stateDir, err)
	}
	if left := cgroupsOf(runID); len(left) > 0 {
		t.Errorf("cgroups of the run are left: %v", left)
	}
	mounts, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(mounts), stateDir) {
		t.Errorf("mounts under %s are left on the machine", stateDir)
	}
	for path, was := range existing("/run/docker", "/run/containerd") {
		if was && !hostRun[path] {
			t.Errorf("%s appeared on the machine", path)
		}
	}
}

// everyEngineKnows are the capabilities every Docker engine grants a
// privileged container where the bounding set has them: 0 to 37
// (CAP_AUDIT_READ). Docker 20.10 knows no later one.
const everyEngineKnows = 1<<38 - 1

// checkPrivileged checks that a privileged process has every capability
// of the machine's bounding set that the engine knows, and none outside it.
func checkPrivileged(t *testing.T, what string, got, bounding uint64) {
	t.Helper()
	if got&^bounding != 0 {
		t.Errorf("%s has capabilities %016x outside the bounding set %016x", what, got&^bounding, bounding)
	}
	if want := bounding & everyEngineKnows; got&want != want {
		t.Errorf("%s has capabilities %016x, lacking %016x of the bounding set", what, got, want&^got)
	}
}

// capabilities reads a capability mask (CapBnd, CapEff) of a status file.
func capabilities(t *testing.T, path, field string) uint64 {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return capabilitiesIn(t, string(data), field)
}

func capabilitiesIn(t *testing.T, status, field string) uint64 {
	t.Helper()
	for _, line := range strings.Split(status, "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			mask, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			return mask
		}
	}
	t.Fatalf("no %s in:\n%s", field, status)
	return 0
}

func logOf(e *dockerd.Engine) string {
	data, _ := os.ReadFile(filepath.Join(e.StateDir(), "dockerd.log"))
	return string(data)
}
