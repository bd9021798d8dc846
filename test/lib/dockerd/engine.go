// Package dockerd gives tests a Docker engine to run containers in, kind's
// nodes among them: the machine's own engine where docker answers (a
// laptop, a CI runner), or else a private dockerd that the test starts and
// removes again, leaving the machine as it found it. It does not build
// images or run kind; it only provides the engine and the way to talk to it.
//
// A private daemon (Start) lives in namespaces of its own, so that neither
// the machine's network nor the tests running beside it see it:
//
//   - a PID namespace whose init, docker-init, is a child of the test and
//     dies with it (parent-death signal). When it dies, the kernel kills
//     every process of the daemon: dockerd, its containerd, the shims and
//     the containers;
//   - a network namespace for its bridges, veths and published ports. No
//     firewall rule is written (--iptables=false --ip6tables=false), not
//     even in there. Programs that talk to the containers, such as kind and
//     kubectl, run in it (Engine.Command);
//   - a private mount namespace for its overlay mounts and the network
//     namespaces of its containers, with a tmpfs on /run for the state of
//     dockerd, containerd and the shims.
//
// What is left on the machine is its state directory (data root, socket,
// log) under StateBase, and the cgroups of its containers under
// mcsd-dockerd/<run> in every hierarchy. Stop removes both; after a killed
// run, the next Start does (CleanStale).
//
// Privileged containers need every capability the spec asks for to be in
// the bounding set, which some machines lack (CAP_SYS_RESOURCE in some
// sandboxes): the private daemon's default runtime is test/cmd/boundedrunc,
// which removes what the bounding set lacks from each spec and runs runc.
package dockerd

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"

	"github.com/mcsd-io/mcsd/test/lib/netns"
)

// Engine is a Docker engine and where its containers are reachable.
type Engine struct {
	// Host is the engine's address as DOCKER_HOST takes it; empty for the
	// machine's engine, which the docker client finds itself.
	Host string
	// NetNS is the network namespace the engine's containers and published
	// ports are reachable in; nil for the machine's network.
	NetNS *netns.NS

	// daemon is the private daemon behind the engine; nil for the
	// machine's.
	daemon *daemon
}

// Private reports whether the engine is a daemon this process started.
func (e *Engine) Private() bool { return e.daemon != nil }

// StateDir is a private daemon's state directory, which holds its log
// (dockerd.log); empty for the machine's engine.
func (e *Engine) StateDir() string {
	if e.daemon == nil {
		return ""
	}
	return e.daemon.dir
}

// PID is the pid of a private daemon's init: every process of the daemon,
// containers included, is in its PID namespace. 0 for the machine's engine.
func (e *Engine) PID() int {
	if e.daemon == nil || e.daemon.cmd.Process == nil {
		return 0
	}
	return e.daemon.cmd.Process.Pid
}

// Env is the environment of a program that talks to the engine: this
// process's, with DOCKER_HOST naming the engine.
func (e *Engine) Env() []string {
	if e.Host == "" {
		return os.Environ()
	}
	env := []string{"DOCKER_HOST=" + e.Host}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "DOCKER_HOST=") && !strings.HasPrefix(kv, "DOCKER_CONTEXT=") {
			env = append(env, kv)
		}
	}
	return env
}

// Command returns a command that talks to the engine and reaches its
// containers: it runs in the engine's network namespace with Env.
func (e *Engine) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	var cmd *exec.Cmd
	if e.NetNS != nil {
		cmd = e.NetNS.Command(ctx, name, args...)
	} else {
		cmd = exec.CommandContext(ctx, name, args...)
	}
	cmd.Env = e.Env()
	return cmd
}

// Docker runs the docker client against the engine and returns its
// standard output; its error carries the client's standard error.
func (e *Engine) Docker(ctx context.Context, args ...string) (string, error) {
	cmd := e.Command(ctx, "docker", args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("docker %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return string(out), nil
}

// Stop stops a private daemon and removes everything it left: its
// processes, containers, networks, mounts, cgroups and state directory.
// The machine's engine is left alone.
func (e *Engine) Stop() error {
	if e.daemon == nil {
		return nil
	}
	return e.daemon.stop()
}

// Machine returns the machine's own engine when a docker client is on PATH
// and its daemon answers; the error says why not.
func Machine(ctx context.Context) (*Engine, error) {
	if _, err := exec.LookPath("docker"); err != nil {
		return nil, fmt.Errorf("no docker client on PATH: %w", err)
	}
	e := &Engine{}
	if _, err := e.Docker(ctx, "version", "--format", "{{.Server.Version}}"); err != nil {
		return nil, fmt.Errorf("the machine's Docker engine does not answer: %w", err)
	}
	return e, nil
}
