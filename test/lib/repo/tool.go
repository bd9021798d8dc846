package repo

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Tool builds, once per pinned version, the program test/tools/<name>/build.sh
// pins into the cache's <name> folder (the script locks, skips a cached build
// and prints the version's folder; the first build takes minutes), and
// returns the path of the program, named binary in that folder. The Makefile
// runs the same scripts before the tests.
func Tool(ctx context.Context, name, binary string) (string, error) {
	root, err := Root()
	if err != nil {
		return "", err
	}
	cache, err := Cache()
	if err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(root, "test/tools", name, "build.sh"), filepath.Join(cache, name))
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("building %s (test/tools/%s/build.sh): %w", binary, name, err)
	}
	return filepath.Join(strings.TrimSpace(string(out)), binary), nil
}
