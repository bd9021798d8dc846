package harness_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcsd-io/mcsd/test/lib/repo"
	"github.com/mcsd-io/mcsd/test/lib/testenv"
)

// A real node's mount namespace puts a directory of its own over /tmp (and
// /run, /var/lib, /var/log), which once hid a checkout under /tmp, its
// cache and the binaries in it from the node: containerd could not even be
// started. This test copies the checkout (as it is, uncommitted changes
// included) into a directory nested under /tmp, with the default cache
// (its .cache) and the run's state directory under /tmp too, and runs
// there one real-node test of this package. /tmp, not os.TempDir: the
// node's own /tmp is what hides things, whatever TMPDIR says.
func TestRealNodesFromACheckoutUnderTmp(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequireCommands(t, "git", "go", "runc", "nsenter", "unshare", "gcc")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	root, err := repo.Root()
	if err != nil {
		t.Fatal(err)
	}
	cache, err := repo.Cache()
	if err != nil {
		t.Fatal(err)
	}
	tmp, err := os.MkdirTemp("/tmp", "mcsd-anypath-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := os.RemoveAll(tmp); err != nil {
			t.Errorf("removing the copy under /tmp: %v", err)
		}
	})
	checkout := filepath.Join(tmp, "nested", "mcsd")
	copyCheckout(t, root, checkout)
	// What the real node runs, from the cache: the same files under a
	// path below /tmp, hard links where they can be (copies otherwise).
	// Symbolic links to the original cache would prove nothing: the node
	// would follow them out of /tmp.
	for _, sub := range []string{"k8s", "containerd", "images/pause-*"} {
		matches, _ := filepath.Glob(filepath.Join(cache, sub))
		for _, src := range matches {
			rel, _ := filepath.Rel(cache, src)
			linkTree(t, src, filepath.Join(checkout, ".cache", rel))
		}
	}

	const inner = "TestRealNodesOfAKilledRunAreCleanedOnTheNextStart"
	cmd := exec.CommandContext(ctx, "go", "test", "-count=1", "-v", "-run", "^"+inner+"$", "./test/lib/harness/")
	cmd.Dir = checkout
	cmd.Env = append(withoutEnv(os.Environ(), "MCSD_CACHE", "MCSD_HARNESS_DIR"),
		"MCSD_HARNESS_DIR="+filepath.Join(tmp, "state"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the real-node test from %s failed: %v\n%s", checkout, err, out)
	}
	// A skipped test passes too, and proves nothing.
	if !bytes.Contains(out, []byte("--- PASS: "+inner)) {
		t.Fatalf("the real-node test from %s did not run:\n%s", checkout, out)
	}
}

// copyCheckout copies the files of the working tree at root (tracked and
// untracked, not ignored: no .cache, no build output) to dst.
func copyCheckout(t *testing.T, root, dst string) {
	t.Helper()
	out, err := exec.Command("git", "-C", root, "ls-files", "-z", "--cached", "--others", "--exclude-standard").Output()
	if err != nil {
		t.Fatalf("listing the checkout's files: %v", err)
	}
	for _, name := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
		src := filepath.Join(root, name)
		st, err := os.Lstat(src)
		if errors.Is(err, fs.ErrNotExist) {
			continue // deleted, not yet committed
		}
		if err != nil {
			t.Fatal(err)
		}
		to := filepath.Join(dst, name)
		if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
			t.Fatal(err)
		}
		if st.Mode()&fs.ModeSymlink != 0 {
			target, err := os.Readlink(src)
			if err == nil {
				err = os.Symlink(target, to)
			}
			if err != nil {
				t.Fatal(err)
			}
			continue
		}
		copyFile(t, src, to, st.Mode())
	}
}

// linkTree hard-links the files below src to the same places below dst,
// copying those it cannot link (another file system).
func linkTree(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		to := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(to, 0o755)
		}
		if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
			return err
		}
		if os.Link(path, to) == nil {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		copyFile(t, path, to, info.Mode())
		return nil
	})
	if err != nil {
		t.Fatalf("linking %s to %s: %v", src, dst, err)
	}
}

func copyFile(t *testing.T, src, dst string, mode fs.FileMode) {
	t.Helper()
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode.Perm())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}

// withoutEnv returns env without the named variables.
func withoutEnv(env []string, names ...string) []string {
	var out []string
next:
	for _, kv := range env {
		for _, name := range names {
			if strings.HasPrefix(kv, name+"=") {
				continue next
			}
		}
		out = append(out, kv)
	}
	return out
}
