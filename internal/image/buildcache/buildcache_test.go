package buildcache

import (
	"errors"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
)

func TestGet(t *testing.T) {
	t.Run("concurrent callers build once and all get the entry", func(t *testing.T) {
		dir := t.TempDir()
		var builds atomic.Int32
		var wg sync.WaitGroup
		paths := make([]string, 8)
		errs := make([]error, 8)
		for i := range paths {
			wg.Add(1)
			go func() {
				defer wg.Done()
				paths[i], errs[i] = Get(dir, "sub/entry", func(tmp string) error {
					builds.Add(1)
					return os.WriteFile(tmp, []byte("built"), 0o644)
				})
			}()
		}
		wg.Wait()
		if n := builds.Load(); n != 1 {
			t.Errorf("built %d times, want once", n)
		}
		for i, p := range paths {
			if errs[i] != nil {
				t.Fatalf("caller %d: %v", i, errs[i])
			}
			if got, err := os.ReadFile(p); err != nil || string(got) != "built" {
				t.Errorf("caller %d read %q, %v from %s", i, got, err, p)
			}
		}
	})

	t.Run("a failed build leaves nothing and the next call builds again", func(t *testing.T) {
		dir := t.TempDir()
		boom := errors.New("boom")
		_, err := Get(dir, "entry", func(tmp string) error {
			if err := os.WriteFile(tmp, []byte("half"), 0o644); err != nil {
				return err
			}
			return boom
		})
		if !errors.Is(err, boom) {
			t.Fatalf("Get = %v, want the build's error", err)
		}
		for _, p := range []string{"entry", "entry.tmp"} {
			if _, err := os.Lstat(filepath.Join(dir, p)); !os.IsNotExist(err) {
				t.Errorf("%s is left after a failed build (%v)", p, err)
			}
		}
		p, err := Get(dir, "entry", func(tmp string) error { return os.Mkdir(tmp, 0o755) })
		if err != nil {
			t.Fatal(err)
		}
		if fi, err := os.Stat(p); err != nil || !fi.IsDir() {
			t.Errorf("entry %s after the second build: %v, %v", p, fi, err)
		}
	})

	t.Run("a build does not hold up another entry", func(t *testing.T) {
		dir := t.TempDir()
		release := make(chan struct{})
		started := make(chan struct{})
		done := make(chan error, 1)
		go func() {
			_, err := Get(dir, "slow", func(tmp string) error {
				close(started)
				<-release
				return os.WriteFile(tmp, nil, 0o644)
			})
			done <- err
		}()
		<-started
		if _, err := Get(dir, "fast", func(tmp string) error { return os.WriteFile(tmp, nil, 0o644) }); err != nil {
			t.Fatal(err)
		}
		close(release)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	})

	t.Run("an existing entry is returned without building", func(t *testing.T) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "entry"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := Get(dir, "entry", func(string) error {
			t.Error("built an entry that exists")
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	})
}
