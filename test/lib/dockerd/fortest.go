package dockerd

import (
	"context"
	"os"
	"os/exec"
	"testing"
)

// ForTest returns the machine's Docker engine when it answers, or else a
// private daemon that is stopped, and everything it left removed, when the
// test ends. It skips the test, naming what is missing, only where no
// engine can be had: no engine answers and this process is not root or
// has no dockerd (Debian's docker.io). It fails the test when a private
// daemon can be had but does not start.
func ForTest(ctx context.Context, t testing.TB) *Engine {
	t.Helper()
	if testing.Short() {
		t.Skip("needs a Docker engine; skipped under -short")
	}
	machine, machineErr := Machine(ctx)
	if machineErr == nil {
		t.Log("Docker: the machine's engine")
		return machine
	}
	if os.Geteuid() != 0 {
		t.Skipf("no Docker engine: %v; and a private dockerd needs root", machineErr)
	}
	if _, err := exec.LookPath("dockerd"); err != nil {
		t.Skipf("no Docker engine: %v; and no dockerd for a private one (apt-get install docker.io)", machineErr)
	}
	e, err := Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := e.Stop(); err != nil {
			t.Errorf("stopping the private dockerd: %v", err)
		}
	})
	t.Logf("Docker: a private dockerd at %s", e.Host)
	return e
}
