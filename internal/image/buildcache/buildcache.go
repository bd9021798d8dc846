// Package buildcache keeps build outputs that are expensive to make (a
// Debian root filesystem, an image archive, a compiled binary) in a
// directory, each under a name that says everything it was built from, and
// builds each at most once even when several processes ask at the same time.
// It never expires or replaces an entry: a different input is a different
// name.
package buildcache

import (
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// Get returns the path dir/name, first calling build to make it when it does
// not exist yet. build writes its output to tmp (a path next to the entry,
// absent when build starts: build creates a file or a directory there), which
// becomes the entry only when build succeeds, so an interrupted build never
// leaves a half-written entry. An exclusive lock on the entry's lock file
// (dir/name.lock) is held while checking and building: a second caller of
// the same entry, in this process or another, waits and then finds it built;
// callers of other entries do not wait.
func Get(dir, name string, build func(tmp string) error) (string, error) {
	entry := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(entry), 0o755); err != nil {
		return "", fmt.Errorf("creating the build cache %s: %w", filepath.Dir(entry), err)
	}
	lock, err := os.OpenFile(entry+".lock", os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", fmt.Errorf("opening the lock of build cache entry %s: %w", entry, err)
	}
	defer lock.Close()
	// flock locks belong to the open file, so goroutines of one process
	// exclude each other too; the lock goes with the file when it closes.
	for {
		err = unix.Flock(int(lock.Fd()), unix.LOCK_EX)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		return "", fmt.Errorf("locking build cache entry %s: %w", entry, err)
	}

	if _, err := os.Lstat(entry); err == nil {
		return entry, nil
	} else if !os.IsNotExist(err) {
		return "", fmt.Errorf("reading build cache entry %s: %w", entry, err)
	}
	tmp := entry + ".tmp"
	// What a killed build left behind.
	if err := os.RemoveAll(tmp); err != nil {
		return "", fmt.Errorf("removing the unfinished build %s: %w", tmp, err)
	}
	if err := build(tmp); err != nil {
		_ = os.RemoveAll(tmp)
		return "", err
	}
	if err := os.Rename(tmp, entry); err != nil {
		_ = os.RemoveAll(tmp)
		return "", fmt.Errorf("storing build cache entry %s: %w", entry, err)
	}
	return entry, nil
}
