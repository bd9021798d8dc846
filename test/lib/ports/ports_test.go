package ports

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// holderEnv names the port a child of this test binary asks the lock
// file about.
const holderEnv = "MCSD_PORTS_HOLDER_OF"

// TestMain lets the test binary run as that child: it prints the PID of
// the process holding the port's lock, or 0.
func TestMain(m *testing.M) {
	if port := os.Getenv(holderEnv); port != "" {
		p, err := strconv.Atoi(port)
		if err != nil {
			panic(err)
		}
		f, err := os.OpenFile(filepath.Join(os.TempDir(), "mcsd-test-ports.lock"), os.O_RDWR, 0)
		if err != nil {
			panic(err)
		}
		lk := unix.Flock_t{Type: unix.F_WRLCK, Start: int64(p), Len: 1}
		if err := unix.FcntlFlock(f.Fd(), unix.F_GETLK, &lk); err != nil {
			panic(err)
		}
		holder := int32(0)
		if lk.Type != unix.F_UNLCK {
			holder = lk.Pid
		}
		os.Stdout.WriteString(strconv.Itoa(int(holder)) + "\n")
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func TestFreeLocksThePortForOtherProcesses(t *testing.T) {
	port, err := Free()
	if err != nil {
		t.Fatal(err)
	}
	if port < low || port >= high {
		t.Fatalf("port %d outside [%d, %d)", port, low, high)
	}
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), holderEnv+"="+strconv.Itoa(port))
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(out)); got != strconv.Itoa(os.Getpid()) {
		t.Errorf("another process sees port %d's lock held by PID %s, want this test's %d", port, got, os.Getpid())
	}
}

func TestFreeNeverHandsOutAPortTwice(t *testing.T) {
	seen := map[int]bool{}
	for range 500 {
		port, err := Free()
		if err != nil {
			t.Fatal(err)
		}
		if seen[port] {
			t.Fatalf("port %d handed out twice", port)
		}
		seen[port] = true
	}
}
