// Package nsenter runs code inside a Linux network namespace named by its
// path, so that mcsd's data plane (nftables rules, conntrack, the DNS
// listener) can live in a namespace other than the daemon's own while its
// API connections stay where they are. It changes no namespace but the one
// of the OS thread it locks for the duration of a call.
package nsenter

import (
	"fmt"
	"runtime"

	vnetns "github.com/vishvananda/netns"
)

// Do runs fn on an OS thread switched into the network namespace at path
// (for example /run/netns/NAME or /proc/PID/ns/net). Sockets fn opens stay in
// that namespace for their whole life, and programs fn starts inherit it. An
// empty path runs fn where the caller is. If the thread cannot be switched
// back it is never returned to the scheduler in the wrong namespace: it stays
// locked and exits with the goroutine.
func Do(path string, fn func() error) error {
	if path == "" {
		return fn()
	}
	runtime.LockOSThread()
	orig, err := vnetns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("reading the current network namespace: %w", err)
	}
	defer orig.Close()
	target, err := vnetns.GetFromPath(path)
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("opening network namespace %s: %w", path, err)
	}
	defer target.Close()
	if err := vnetns.Set(target); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("entering network namespace %s: %w", path, err)
	}
	fnErr := fn()
	if err := vnetns.Set(orig); err != nil {
		return fmt.Errorf("leaving network namespace %s: %w", path, err)
	}
	runtime.UnlockOSThread()
	return fnErr
}
