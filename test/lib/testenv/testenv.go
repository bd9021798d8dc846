// Package testenv decides whether a test that needs real system parts (root,
// network namespaces, nftables, the harness's API servers) may run. Such tests
// are skipped under -short (make test-unit) and fail loudly otherwise, so a
// full run (make test) can never pass by silently skipping them.
package testenv

import (
	"os"
	"os/exec"
	"testing"
)

// RequireRoot skips t under -short and fails it when the process is not root.
func RequireRoot(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("needs root and real system parts; skipped under -short")
	}
	if os.Geteuid() != 0 {
		t.Fatal("this test needs root (network namespaces, nftables); run it as root, or run `make test-unit` for the tests that do not")
	}
}

// RequireCommands skips t under -short, and fails it when any of the named
// programs is not on PATH: a test that runs system programs is no unit test.
func RequireCommands(t testing.TB, names ...string) {
	t.Helper()
	if testing.Short() {
		t.Skipf("runs %v; skipped under -short", names)
	}
	for _, name := range names {
		if _, err := exec.LookPath(name); err != nil {
			t.Fatalf("this test needs %q on PATH (make test installs it through .ci/run): %v", name, err)
		}
	}
}
