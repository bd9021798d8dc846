package kindnode_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/mcsd-io/mcsd/test/lib/dockerd"
	"github.com/mcsd-io/mcsd/test/lib/kindnode"
	"github.com/mcsd-io/mcsd/test/lib/testenv"
)

// The node image boots as kind starts a node: systemd as PID 1 under kind's
// entrypoint, with containerd running and answering crictl over CRI,
// every image kubeadm runs (and the sandbox image) in containerd before
// kubelet starts, and the pinned kubeadm, kubelet and kubectl in place. A second build is a
// cache hit with the same reference.
func TestNodeImageBootsAsKindRunsIt(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequireCommands(t, "mmdebstrap", "go")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()

	began := time.Now()
	img, err := kindnode.Build(ctx, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(img.Path)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("node image %s (%s, %d MiB) in %v", img.Ref, img.Path, st.Size()>>20, time.Since(began).Round(time.Millisecond))
	again, err := kindnode.Build(ctx, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	if again != img {
		t.Errorf("a second build gave %+v, want the cached %+v", again, img)
	}

	e := dockerd.ForTest(ctx, t)
	began = time.Now()
	if _, err := e.Docker(ctx, "load", "-i", img.Path); err != nil {
		t.Fatal(err)
	}
	t.Logf("loaded in %v", time.Since(began).Round(time.Millisecond))
	name := "mcsd-kindnode-test"
	_, _ = e.Docker(ctx, "rm", "-f", name)
	t.Cleanup(func() { _, _ = e.Docker(context.Background(), "rm", "-f", "-v", name) })
	// The options kind creates a node with (pkg/cluster/internal/providers/docker).
	began = time.Now()
	if _, err := e.Docker(ctx, "run", "-d", "--name", name, "--hostname", name,
		"--privileged", "--security-opt", "seccomp=unconfined", "--security-opt", "apparmor=unconfined",
		"--tmpfs", "/tmp", "--tmpfs", "/run", "--volume", "/var", "--volume", "/lib/modules:/lib/modules:ro",
		img.Ref); err != nil {
		t.Fatal(err)
	}
	var state string
	err = wait.PollUntilContextTimeout(ctx, time.Second, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		out, _ := e.Docker(ctx, "exec", name, "systemctl", "is-system-running")
		state = strings.TrimSpace(out)
		return state == "running" || state == "degraded", nil
	})
	if err != nil {
		logs, _ := e.Docker(ctx, "logs", name)
		t.Fatalf("systemd never finished booting (last said %q): %v\n%s", state, err, logs)
	}
	t.Logf("systemd %s after %v", state, time.Since(began).Round(time.Millisecond))
	if state != "running" {
		failed, _ := e.Docker(ctx, "exec", name, "systemctl", "--failed", "--no-pager")
		t.Errorf("systemd is %s:\n%s", state, failed)
	}

	var version string
	err = wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		out, err := e.Docker(ctx, "exec", name, "crictl", "version")
		version = out
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("crictl never reached containerd: %s", version)
	}
	if !strings.Contains(version, "RuntimeName:  containerd") || !strings.Contains(version, "RuntimeVersion:  v2.") {
		t.Errorf("crictl version says:\n%s\nwant containerd 2.x", version)
	}
	kindVersion, err := e.Docker(ctx, "exec", name, "cat", "/kind/version")
	if err != nil {
		t.Fatal(err)
	}
	// Every image kubeadm runs, and the sandbox image, is in containerd
	// before kubelet starts.
	if out, err := e.Docker(ctx, "exec", name, "systemctl", "is-active", "kind-preload-images.service"); err != nil {
		status, _ := e.Docker(ctx, "exec", name, "systemctl", "status", "--no-pager", "kind-preload-images.service")
		t.Fatalf("the preloaded images were not imported (%s): %v\n%s", out, err, status)
	}
	wanted, err := e.Docker(ctx, "exec", name, "kubeadm", "config", "images", "list", "--kubernetes-version", strings.TrimSpace(kindVersion))
	if err != nil {
		t.Fatal(err)
	}
	have, err := e.Docker(ctx, "exec", name, "crictl", "images", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	for _, ref := range append(strings.Fields(wanted), "registry.k8s.io/pause:3.10") {
		if !strings.Contains(have, `"`+ref+`"`) {
			t.Errorf("containerd lacks %s; it has:\n%s", ref, have)
		}
	}

	out, err := e.Docker(ctx, "exec", name, "kubeadm", "version", "-o", "short")
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(out) != strings.TrimSpace(kindVersion) || !strings.HasPrefix(out, "v1.") {
		t.Errorf("kubeadm is %q and /kind/version says %q", out, kindVersion)
	}
	for _, cmd := range [][]string{{"kubelet", "--version"}, {"kubectl", "version", "--client"}} {
		out, err := e.Docker(ctx, append([]string{"exec", name}, cmd...)...)
		if err != nil {
			t.Errorf("%s: %v", cmd[0], err)
		} else if !strings.Contains(out, strings.TrimSpace(kindVersion)) {
			t.Errorf("%s says %q, want version %s", cmd[0], out, kindVersion)
		}
	}
}
