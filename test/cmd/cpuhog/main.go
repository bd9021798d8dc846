// Command cpuhog keeps the machine's cores busy for a bounded time, so that
// a test can say under what load it ran instead of inheriting whatever load
// the machine has: -workers busy loops (default: one per core) at the
// scheduling priority it was started with, for -for, then it exits. It also
// exits on SIGTERM or SIGINT, and when its parent dies, so that a
// test killed halfway leaves no hog behind.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"syscall"
	"time"
)

func main() {
	workers := flag.Int("workers", runtime.NumCPU(), "busy loops to run, each on its own thread")
	duration := flag.Duration("for", time.Minute, "how long to run (at most 1h)")
	flag.Parse()
	if *workers < 1 {
		fail(fmt.Errorf("-workers %d: give at least 1", *workers))
	}
	if *duration <= 0 || *duration > time.Hour {
		fail(fmt.Errorf("-for %v: give a duration above 0 and at most 1h", *duration))
	}

	runtime.GOMAXPROCS(*workers + 1)
	for range *workers {
		go spin()
	}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	end := time.After(*duration)
	// An orphan is re-parented: its parent id changes.
	parent := os.Getppid()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-end:
			return
		case <-tick.C:
			if os.Getppid() != parent {
				return
			}
		}
	}
}

// spin burns a thread until the process exits.
func spin() {
	runtime.LockOSThread()
	x := uint64(1)
	for {
		// A xorshift step: work the compiler cannot drop.
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		if x == 0 {
			x = 1
		}
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "cpuhog:", err)
	os.Exit(2)
}
