package realnode

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mcsd-io/mcsd/test/lib/images"
)

// upgradeFromEnv names the commit an upgrade starts from; the one before
// this source tree's when unset.
const upgradeFromEnv = "MCSD_UPGRADE_FROM"

// previous is the software of the commit an upgrade starts from: its mcsd
// image, imported into every node, and its kubectl-mcs.
type previous struct {
	rev    string
	mcsd   images.Image
	binDir string
}

// buildPrevious checks the commit an upgrade starts from out into the
// run's state directory with git worktree, builds its image and its
// kubectl-mcs as this tree's are built (the image cache is shared, so only
// what differs builds), imports the image into every node and removes the
// checkout.
func (w *world) buildPrevious(ctx context.Context, t *testing.T) previous {
	t.Helper()
	from := os.Getenv(upgradeFromEnv)
	if from == "" {
		from = "HEAD^"
	}
	rev, err := git(ctx, w.root, "rev-parse", "--verify", "--end-of-options", from+"^{commit}")
	if err != nil {
		shallow, _ := git(ctx, w.root, "rev-parse", "--is-shallow-repository")
		t.Fatalf("the upgrade starts from %s, which this checkout does not have (shallow: %s); fetch the history (git fetch --unshallow) or name a commit it has in %s: %v",
			from, shallow, upgradeFromEnv, err)
	}
	tree := filepath.Join(w.dir, "upgrade-from")
	// A checkout of a run that was killed is gone with its state
	// directory; prune forgets it.
	if _, err := git(ctx, w.root, "worktree", "prune"); err != nil {
		t.Fatal(err)
	}
	if _, err := git(ctx, w.root, "worktree", "add", "--detach", tree, rev); err != nil {
		t.Fatal(err)
	}
	remove := func() error {
		if _, err := os.Stat(tree); err != nil {
			return nil
		}
		_, err := git(context.Background(), w.root, "worktree", "remove", "--force", tree)
		return err
	}
	t.Cleanup(func() {
		if err := remove(); err != nil {
			t.Error(err)
		}
	})
	p := previous{rev: rev, binDir: filepath.Join(w.dir, "upgrade-from-bin")}
	if err := buildPlugin(ctx, tree, p.binDir); err != nil {
		t.Fatal(err)
	}
	if p.mcsd, err = images.MCSDFrom(ctx, tree, "v0.0.0-realnode-"+rev[:12]); err != nil {
		t.Fatalf("building the mcsd image of %s: %v", rev, err)
	}
	if err := remove(); err != nil {
		t.Fatal(err)
	}
	if err := w.cs.ImportImage(ctx, p.mcsd); err != nil {
		t.Fatal(err)
	}
	return p
}

// git runs git in dir and returns its output, trimmed.
func git(ctx context.Context, dir string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("git %s in %s: %w\n%s", strings.Join(args, " "), dir, err, out)
	}
	return strings.TrimSpace(string(out)), nil
}
