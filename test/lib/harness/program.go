package harness

import (
	"fmt"
	"path/filepath"
	"syscall"
	"time"
)

// Program is a program a test runs beside the control planes, such as mcsd:
// its output goes to a log in the run's directory, it dies with the test
// (and is cleaned up as a leftover should the test be killed), and it can be
// stopped gracefully, killed, and started again with the same arguments.
type Program struct {
	p *process
}

// StartProgram starts path with args as a program of the run, named name
// (which names its log and pid files). The ClusterSet stops it on Close,
// before the control planes.
func (cs *ClusterSet) StartProgram(name, path string, args ...string) (*Program, error) {
	p := &process{name: name, path: path, args: args, logPath: filepath.Join(cs.Dir, name+".log"), pidDir: cs.Dir}
	if err := p.start(); err != nil {
		return nil, err
	}
	cs.programsMu.Lock()
	cs.programs = append(cs.programs, p)
	cs.programsMu.Unlock()
	return &Program{p: p}, nil
}

// LogPath is the file the program's output goes to.
func (pr *Program) LogPath() string { return pr.p.logPath }

// Tail returns the last lines of the program's log.
func (pr *Program) Tail(lines int) string { return pr.p.tail(lines) }

// Exited reports whether the program has ended, and how.
func (pr *Program) Exited() (bool, error) { return pr.p.exited() }

// Terminate sends SIGTERM and waits up to timeout for the program to exit,
// then kills what is left of its process group.
func (pr *Program) Terminate(timeout time.Duration) error {
	pr.p.mu.Lock()
	cmd, done := pr.p.cmd, pr.p.done
	pr.p.mu.Unlock()
	if cmd == nil {
		return nil
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
		_, err := pr.p.exited()
		return err
	case <-time.After(timeout):
		pr.p.stop()
		return fmt.Errorf("%s did not exit within %v of SIGTERM; killed", pr.p.name, timeout)
	}
}

// Kill kills the program at once, as a crash or an OOM kill would.
func (pr *Program) Kill() { pr.p.stop() }

// Restart starts the program again, with the same arguments, once it has
// exited.
func (pr *Program) Restart() error {
	if done, _ := pr.p.exited(); !done {
		return fmt.Errorf("%s is still running", pr.p.name)
	}
	return pr.p.start()
}
