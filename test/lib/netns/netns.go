// Package netns gives tests named Linux network namespaces to stand in for
// nodes and pods: create one, run code or commands inside it, open sockets
// that live in it, and delete it. Only namespaces a test created itself are
// touched. It needs root and iproute2's `ip`.
package netns

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"

	"github.com/mcsd-io/mcsd/nsenter"
)

// NS is a named network namespace (a file under /run/netns), or one known
// only by a path (At).
type NS struct {
	Name string
	// path, when set, is where the namespace is (At); it has no name.
	path string
}

// At returns the network namespace at path, such as /proc/PID/ns/net of a
// container's process: code, sockets and commands run in it as in a named
// one; it cannot be deleted through it.
func At(path string) *NS { return &NS{path: path} }

// nsPath is where the namespace is.
func (n *NS) nsPath() string {
	if n.path != "" {
		return n.path
	}
	return Path(n.Name)
}

// New creates the named namespace with its loopback up. An existing namespace
// of that name is an error: it belongs to someone else or to a stale run.
func New(name string) (*NS, error) {
	if _, err := os.Stat(Path(name)); err == nil {
		return nil, fmt.Errorf("network namespace %q already exists", name)
	}
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("creating network namespace %q: %v: %s", name, err, strings.TrimSpace(string(out)))
	}
	ns := &NS{Name: name}
	if _, err := ns.IP("link", "set", "lo", "up"); err != nil {
		_ = ns.Delete()
		return nil, err
	}
	return ns, nil
}

// Path is where a named namespace is pinned.
func Path(name string) string { return "/run/netns/" + name }

// List returns the names of all pinned namespaces that start with prefix.
func List(prefix string) ([]string, error) {
	entries, err := os.ReadDir("/run/netns")
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), prefix) {
			names = append(names, e.Name())
		}
	}
	return names, nil
}

// Delete removes the namespace; its interfaces go with it. Deleting one that
// is already gone is not an error.
func (n *NS) Delete() error {
	if n.path != "" {
		return fmt.Errorf("the network namespace at %s is not the test's to delete", n.path)
	}
	return DeleteNamed(n.Name)
}

// DeleteNamed removes a namespace by name; a missing one is not an error.
func DeleteNamed(name string) error {
	if _, err := os.Stat(Path(name)); os.IsNotExist(err) {
		return nil
	}
	if out, err := exec.Command("ip", "netns", "delete", name).CombinedOutput(); err != nil {
		return fmt.Errorf("deleting network namespace %q: %v: %s", name, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// IP runs `ip -n <ns> args...` and returns its output.
func (n *NS) IP(args ...string) (string, error) {
	if n.path != "" {
		return n.Exec("ip", args...)
	}
	return n.run("ip", append([]string{"-n", n.Name}, args...)...)
}

// Exec runs a program inside the namespace and returns its combined output.
func (n *NS) Exec(name string, args ...string) (string, error) {
	argv := n.argv(name, args)
	return n.run(argv[0], argv[1:]...)
}

// Command returns a command that runs inside the namespace, for callers that
// need its pipes or want it to run in the background.
func (n *NS) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	argv := n.argv(name, args)
	return exec.CommandContext(ctx, argv[0], argv[1:]...)
}

// argv is the command line that runs name with args inside the namespace:
// `ip netns exec` for a named one, nsenter for one known by its path.
func (n *NS) argv(name string, args []string) []string {
	if n.path != "" {
		return append([]string{"nsenter", "--net=" + n.path, "--", name}, args...)
	}
	return append([]string{"ip", "netns", "exec", n.Name, name}, args...)
}

func (n *NS) run(name string, args ...string) (string, error) {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// Do runs fn on an OS thread switched into the namespace. Sockets fn opens
// stay in the namespace for their whole life, and programs fn starts inherit
// it.
func (n *NS) Do(fn func() error) error { return nsenter.Do(n.nsPath(), fn) }

// Listen opens a stream listener inside the namespace.
func (n *NS) Listen(network, address string) (net.Listener, error) {
	var l net.Listener
	err := n.Do(func() (err error) {
		l, err = net.Listen(network, address)
		return err
	})
	return l, err
}

// ListenPacket opens a packet listener inside the namespace.
func (n *NS) ListenPacket(network, address string) (net.PacketConn, error) {
	var c net.PacketConn
	err := n.Do(func() (err error) {
		c, err = net.ListenPacket(network, address)
		return err
	})
	return c, err
}

// Dial connects from inside the namespace. address must be a literal IP and
// port: name resolution would run outside the namespace.
func (n *NS) Dial(ctx context.Context, network, address string) (net.Conn, error) {
	var c net.Conn
	err := n.Do(func() (err error) {
		var d net.Dialer
		c, err = d.DialContext(ctx, network, address)
		return err
	})
	return c, err
}
