package harness

import (
	"fmt"
	"path/filepath"
	"sort"
	"strings"
)

// The paths a real node's mount namespace replaces, with the directory of
// the node that takes each one's place.
var nodeMounts = []struct{ target, source string }{
	{"/run", "run"},
	{"/var/lib", "var-lib"},
	{"/var/log", "var-log"},
	{"/tmp", "tmp"},
}

// A bindMount puts source at target (with everything mounted below source).
type bindMount struct{ source, target string }

// machinePaths are the paths of the machine that the node's programs open
// by name: the node's directory (containerd's and the kubelet's and
// kube-proxy's configurations, certificates, kubeconfigs, the CNI network,
// resolv.conf) and the directories of their binaries (containerd finds its
// shim on PATH, runc and the CNI plugins where its configuration says).
// Images are not among them: ctr reads an archive outside the node and
// streams it to containerd. A path a node's program is ever given must be
// in this list, or it may be hidden from the program.
func (n *RealNode) machinePaths() []string {
	return []string{
		n.Dir,
		filepath.Dir(n.bins.kubelet),
		filepath.Dir(n.bins.proxy),
		n.bins.containerdDir,
		filepath.Dir(n.bins.runc),
		n.bins.cniDir,
	}
}

// mountPlan returns the mounts that make the node's mount namespace, in
// the order they are made (see startMountNamespace): first each machine
// path that a node mount would hide, bound at the same path inside the
// node's directory that goes over the mount's target (a hole through it);
// then the node's directories over their targets, the one whose target
// holds the node's directory itself last, for until then every source is
// found where the machine has it, holes included. Paths are resolved: a
// symbolic link into /tmp would lead into the node's own /tmp otherwise.
func (n *RealNode) mountPlan() ([]bindMount, error) {
	var paths []string
	for _, p := range n.machinePaths() {
		abs, err := filepath.Abs(p)
		if err != nil {
			return nil, err
		}
		resolved, err := filepath.EvalSymlinks(abs)
		if err != nil {
			return nil, fmt.Errorf("a path real node %s needs: %w", n.Name, err)
		}
		paths = append(paths, resolved)
	}
	dir := paths[0]
	var holes, over []bindMount
	var last *bindMount
	for _, m := range nodeMounts {
		target, err := filepath.EvalSymlinks(m.target)
		if err != nil {
			return nil, fmt.Errorf("real node %s mounts over %s: %w", n.Name, m.target, err)
		}
		source := filepath.Join(dir, m.source)
		for _, p := range outermostUnder(target, paths) {
			rel, err := filepath.Rel(target, p)
			if err != nil {
				return nil, err
			}
			holes = append(holes, bindMount{source: p, target: filepath.Join(source, rel)})
		}
		if within(target, dir) {
			last = &bindMount{source: source, target: target}
			continue
		}
		over = append(over, bindMount{source: source, target: target})
	}
	if last != nil {
		over = append(over, *last)
	}
	return append(holes, over...), nil
}

// outermostUnder returns the paths that are dir or below it, leaving out
// those below another of them (binding the outer one brings them along),
// each once.
func outermostUnder(dir string, paths []string) []string {
	var under []string
	for _, p := range paths {
		if within(dir, p) {
			under = append(under, p)
		}
	}
	// A path comes before what lies below it.
	sort.Strings(under)
	var out []string
next:
	for _, p := range under {
		for _, o := range out {
			if within(o, p) {
				continue next
			}
		}
		out = append(out, p)
	}
	return out
}

// within reports whether path is dir or below it.
func within(dir, path string) bool {
	return path == dir || strings.HasPrefix(path, strings.TrimSuffix(dir, "/")+"/")
}
