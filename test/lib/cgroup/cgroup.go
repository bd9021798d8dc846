// Package cgroup removes the cgroup trees that tests make for what they
// run (the harness's real nodes, private Docker daemons), once their
// processes are gone. It neither creates cgroups nor kills processes.
package cgroup

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"syscall"
	"time"
)

// RemoveTree removes a cgroup directory and its descendants, deepest
// first. A cgroup whose last process has just been killed may stay busy
// for a moment (the process is still exiting), so removal is retried until
// deadline.
func RemoveTree(dir string, deadline time.Time) error {
	var dirs []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if d.IsDir() {
			dirs = append(dirs, path)
		}
		return nil
	})
	if err != nil {
		return err
	}
	// Deeper paths are longer than their parents: remove the longest first.
	slices.SortFunc(dirs, func(a, b string) int { return len(b) - len(a) })
	for _, d := range dirs {
		for {
			err := syscall.Rmdir(d)
			if err == nil || errors.Is(err, syscall.ENOENT) {
				break
			}
			if !errors.Is(err, syscall.EBUSY) || time.Now().After(deadline) {
				return fmt.Errorf("removing cgroup %s: %w", d, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return nil
}
