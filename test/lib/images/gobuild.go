package images

import (
	"context"
	"fmt"
	"os"
	"os/exec"
)

// goBuild compiles the package pkg of the module at root into out, static
// and without local paths, for an image of the binary alone: a Linux
// binary, whatever system builds it (kind's nodes on a Mac are Linux).
func goBuild(ctx context.Context, root, pkg, out string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags=-s -w", "-o", out, pkg)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux")
	if msg, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("building %s: %w\n%s", pkg, err, msg)
	}
	return nil
}
