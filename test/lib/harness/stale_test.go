package harness_test

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mcsd-io/mcsd/test/lib/harness"
	"github.com/mcsd-io/mcsd/test/lib/netns"
	"github.com/mcsd-io/mcsd/test/lib/testenv"
)

// A run killed with SIGKILL cannot clean up after itself: its control-plane
// processes die with it (parent-death signal), and the next start removes
// its namespaces and state directory.
func TestLeftoversOfAKilledRunAreCleanedOnTheNextStart(t *testing.T) {
	testenv.RequireRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd, runID := clustersetUp(ctx, t, "--clusters=1")
	runDir := filepath.Join(harness.StateBase(), runID)
	pids := recordedPIDs(t, runDir)
	if len(pids) != 6 {
		t.Fatalf("expected 6 control-plane processes, found %d", len(pids))
	}
	namespaces, _ := netns.List("mcsdh" + runID + "-")
	if len(namespaces) == 0 {
		t.Fatal("the run created no network namespaces")
	}

	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	deadline := time.Now().Add(30 * time.Second)
	for _, pid := range pids {
		for syscall.Kill(pid, 0) == nil && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
		if syscall.Kill(pid, 0) == nil {
			t.Errorf("control-plane process %d outlived its killed owner", pid)
		}
	}

	removed, err := harness.CleanStale()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("removed: %v", removed)
	if _, err := os.Stat(runDir); !os.IsNotExist(err) {
		t.Errorf("state directory %s survived cleaning", runDir)
	}
	if left, _ := netns.List("mcsdh" + runID + "-"); len(left) > 0 {
		t.Errorf("namespaces survived cleaning: %v", left)
	}
}

// clustersetUp runs `clusterset up` with args in a process of its own (a
// run the test can kill) and returns once the clusters are ready, with the
// run's ID.
func clustersetUp(ctx context.Context, t *testing.T, args ...string) (*exec.Cmd, string) {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "clusterset")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/mcsd-io/mcsd/test/cmd/clusterset").CombinedOutput(); err != nil {
		t.Fatalf("building clusterset: %v\n%s", err, out)
	}
	cmd := exec.CommandContext(ctx, bin, append([]string{"up"}, args...)...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	lines := bufio.NewScanner(stdout)
	for lines.Scan() {
		if strings.HasPrefix(lines.Text(), "Ready in") {
			return cmd, strconv.Itoa(cmd.Process.Pid) + "x1"
		}
	}
	t.Fatal("clusterset up never became ready")
	return nil, ""
}
