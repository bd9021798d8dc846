// Package kind holds the scripts that run mcsd in kind clusters
// (up.sh, e2e.sh, down.sh) and the tests that keep them and the operator
// scripts of hack/ sound on machines without Docker.
package kind

import (
	"os/exec"
	"path/filepath"
	"testing"
)

// Every shell script mcsd ships passes shellcheck with no finding, the
// sourced files followed.
func TestShellScriptsPassShellcheck(t *testing.T) {
	if testing.Short() {
		t.Skip("shellcheck: not in -short")
	}
	shellcheck, err := exec.LookPath("shellcheck")
	if err != nil {
		t.Fatal("shellcheck is not installed (apt-get install shellcheck): the scripts of test/kind and hack cannot be checked")
	}
	var scripts []string
	for _, pattern := range []string{"*.sh", "../../hack/*.sh"} {
		found, err := filepath.Glob(pattern)
		if err != nil {
			t.Fatal(err)
		}
		scripts = append(scripts, found...)
	}
	if len(scripts) < 5 {
		t.Fatalf("found only %v; the script list looks wrong", scripts)
	}
	cmd := exec.Command(shellcheck, append([]string{"--external-sources", "--source-path=SCRIPTDIR", "--severity=style"}, scripts...)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("shellcheck %v: %v\n%s", scripts, err, out)
	}
	t.Logf("shellcheck: %d scripts clean", len(scripts))
}
