package harness

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// Only the outermost of the paths below a mount's target are bound into
// the node's directory: binding one brings what lies below it along, and
// a sibling that merely shares a prefix is not below it.
func TestOutermostUnder(t *testing.T) {
	for _, tc := range []struct {
		name  string
		dir   string
		paths []string
		want  []string
	}{
		{"nothing below", "/tmp", []string{"/usr/lib/cni", "/srv/cache/k8s", "/tmpfs/x"}, nil},
		{"nested and repeated", "/tmp", []string{"/tmp/a/.cache/k8s/v1", "/tmp/a", "/tmp/a/.cache/containerd/v2", "/tmp/a"}, []string{"/tmp/a"}},
		{"a sibling sharing a prefix", "/tmp", []string{"/tmp/a/b", "/tmp/a-b", "/tmp/a"}, []string{"/tmp/a", "/tmp/a-b"}},
		{"the target itself", "/var/lib", []string{"/var/lib/x", "/var/lib"}, []string{"/var/lib"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := outermostUnder(tc.dir, tc.paths); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("outermostUnder(%s, %v) = %v, want %v", tc.dir, tc.paths, got, tc.want)
			}
		})
	}
}

// A node whose directory and binaries lie under /tmp (the binaries behind
// a symbolic link): the binaries' directories and the node's directory are
// bound through the node's own /tmp first, at their resolved paths, and
// the node's /tmp goes last, after the other mounts whose sources lie in
// the node's directory, under the machine's /tmp.
func TestMountPlanBindsHiddenPathsFirstAndTheNodesOwnTargetLast(t *testing.T) {
	base, err := os.MkdirTemp("/tmp", "mcsd-plan-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(base)
	dir := filepath.Join(base, "state", "cluster1", "node1")
	for _, d := range []string{dir, filepath.Join(base, "cache", "k8s", "v1"), filepath.Join(base, "cache", "containerd", "v2")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(filepath.Join(base, "cache"), filepath.Join(base, "link")); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(base, "link")
	n := &RealNode{Node: &Node{Name: "node1"}, Dir: dir, bins: nodeBinaries{
		kubelet:       filepath.Join(link, "k8s", "v1", "kubelet"),
		proxy:         filepath.Join(link, "k8s", "v1", "kube-proxy"),
		containerdDir: filepath.Join(link, "containerd", "v2"),
		runc:          "/usr/bin/sh",
		cniDir:        "/usr/lib",
	}}
	got, err := n.mountPlan()
	if err != nil {
		t.Fatal(err)
	}
	tmp, err := filepath.EvalSymlinks("/tmp")
	if err != nil {
		t.Fatal(err)
	}
	resolved, err := filepath.EvalSymlinks(base)
	if err != nil {
		t.Fatal(err)
	}
	rel, _ := filepath.Rel(tmp, resolved)
	hole := filepath.Join(resolved, "state", "cluster1", "node1", "tmp", rel)
	own := filepath.Join(resolved, "state", "cluster1", "node1")
	want := []bindMount{
		{filepath.Join(resolved, "cache", "containerd", "v2"), filepath.Join(hole, "cache", "containerd", "v2")},
		{filepath.Join(resolved, "cache", "k8s", "v1"), filepath.Join(hole, "cache", "k8s", "v1")},
		{own, filepath.Join(hole, "state", "cluster1", "node1")},
		{filepath.Join(own, "run"), mustResolve(t, "/run")},
		{filepath.Join(own, "var-lib"), mustResolve(t, "/var/lib")},
		{filepath.Join(own, "var-log"), mustResolve(t, "/var/log")},
		{filepath.Join(own, "tmp"), tmp},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("mount plan:\n%v\nwant:\n%v", got, want)
	}
}

func mustResolve(t *testing.T, path string) string {
	t.Helper()
	p, err := filepath.EvalSymlinks(path)
	if err != nil {
		t.Fatal(err)
	}
	return p
}
