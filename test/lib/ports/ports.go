// Package ports hands out loopback TCP ports that no other test process
// of this machine is handed at the same time.
//
// A test picks a port, closes it, and passes it to a program that binds
// it seconds later; go test runs several packages at once, and each may
// pick the same port in that window. Every pick here takes a POSIX record
// lock on the port's byte of one file that all test processes share, and
// holds it until the process exits, when the kernel drops it: a port
// locked by a live process is never handed out again.
package ports

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"
)

// The range Free picks from: below the kernel's ephemeral ports
// (net.ipv4.ip_local_port_range starts at 32768), so that no outgoing
// connection takes a port between its pick and its bind.
const low, high = 20000, 32000

var (
	mu   sync.Mutex
	lock *os.File
	// POSIX locks never conflict within the process that holds them:
	// the ports this process was handed are remembered here.
	handedOut = map[int]bool{}
)

// Free returns a port of 127.0.0.1 that is free now and that no other
// caller of Free, in this process or another, is handed while this
// process lives.
func Free() (int, error) {
	mu.Lock()
	defer mu.Unlock()
	if lock == nil {
		f, err := os.OpenFile(filepath.Join(os.TempDir(), "mcsd-test-ports.lock"), os.O_RDWR|os.O_CREATE, 0o666)
		if err != nil {
			return 0, fmt.Errorf("opening the port lock file: %w", err)
		}
		lock = f
	}
	for range 1000 {
		port := low + rand.IntN(high-low)
		if handedOut[port] {
			continue
		}
		err := unix.FcntlFlock(lock.Fd(), unix.F_SETLK, &unix.Flock_t{Type: unix.F_WRLCK, Whence: 0, Start: int64(port), Len: 1})
		if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EACCES) {
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("locking port %d: %w", port, err)
		}
		// Locked either way: a port some program holds now stays
		// out of the next picks too.
		handedOut[port] = true
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			continue
		}
		l.Close()
		return port, nil
	}
	return 0, fmt.Errorf("no free port between %d and %d", low, high)
}
