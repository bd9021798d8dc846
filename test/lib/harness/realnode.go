package harness

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/mcsd-io/mcsd/test/lib/images"
	"github.com/mcsd-io/mcsd/test/lib/netns"
)

// RealNode is a node that runs pods for real: containerd (with Debian's
// runc and CNI plugins), a kubelet and kube-proxy (nftables mode), all in
// the node's network namespace and in a mount namespace of the node's own.
// That mount namespace puts directories of the node in place of /run,
// /var/lib, /var/log and /tmp, so two kubelets on one machine share no
// socket, certificate, log or state path (some of them ignore every flag),
// and every mount containerd and the kubelet make (container root
// filesystems, pod network namespaces, volumes) lives and dies with it.
// The kubelet registers the Node object itself; the node's pods get
// addresses from its pod subnet (CNI ptp and host-local), routed like every
// harness pod.
type RealNode struct {
	*Node
	// Dir holds the node's configuration and logs, and the directories its
	// mount namespace shows as /run, /var/lib, /var/log and /tmp.
	Dir string

	bins nodeBinaries
	// cgroup is the node's cgroup below each hierarchy's root (cgroup.go).
	cgroup                             string
	holder, containerd, kubelet, proxy *process
}

// ContainerdSocket is the node's containerd socket, as the harness process
// reaches it (outside the node's mount namespace).
func (n *RealNode) ContainerdSocket() string {
	return filepath.Join(n.Dir, "run", "containerd", "containerd.sock")
}

// DNSServiceIP is the ClusterIP of the cluster DNS Service that real nodes'
// kubelets give pods as their nameserver (clusterDNS). Whoever installs the
// cluster DNS creates the Service with this address.
func (c *Cluster) DNSServiceIP() string {
	a := c.ServiceCIDR.Addr().As4()
	a[3] = 10
	return fmt.Sprintf("%d.%d.%d.%d", a[0], a[1], a[2], a[3])
}

// APIServiceIP is the ClusterIP of the `kubernetes` Service: the first
// address of the service range.
func (c *Cluster) APIServiceIP() string {
	a := c.ServiceCIDR.Addr().As4()
	a[3] = 1
	return fmt.Sprintf("%d.%d.%d.%d", a[0], a[1], a[2], a[3])
}

// GatewayServer is the API server's URL as nodes and pods reach it (see
// gateway.go); empty in runs without real nodes.
func (c *Cluster) GatewayServer() string {
	if c.gateway == nil {
		return ""
	}
	return "https://" + net.JoinHostPort(GatewayIP.String(), strconv.Itoa(c.apiserverPort))
}

// RealNodes are the cluster's real nodes, in the order they were added.
func (c *Cluster) RealNodes() []*RealNode { return c.realNodes }

// newRealNode creates a real node's network; start starts the rest.
func (c *Cluster) newRealNode(runID string) (*RealNode, error) {
	node, err := c.addNodeNetwork()
	if err != nil {
		return nil, err
	}
	node.real = true
	n := &RealNode{
		Node:   node,
		Dir:    filepath.Join(c.dir, node.Name),
		bins:   c.nodeBins,
		cgroup: runCgroup(runID) + "/" + node.Name,
	}
	c.realNodes = append(c.realNodes, n)
	return n, nil
}

// start starts the node: its mount namespace and cgroups, containerd with
// the pause image, its kubelet (and waits for it to report the node Ready)
// and kube-proxy.
func (n *RealNode) start(ctx context.Context, pause images.Image) error {
	// A machine has a default route; without one, a connection from the
	// node (a hostNetwork pod) to a Service's ClusterIP fails before
	// kube-proxy's DNAT sees it. The gateway forwards nothing, so traffic
	// to anywhere else ends there.
	if _, err := n.NS.IP("route", "add", "default", "via", GatewayIP.String(), "dev", "uplink"); err != nil {
		return err
	}
	for _, m := range nodeMounts {
		if err := os.MkdirAll(filepath.Join(n.Dir, m.source), 0o755); err != nil {
			return err
		}
	}
	if err := makeCgroup(n.cgroup+"/daemons", []string{trackHierarchy, "systemd"}); err != nil {
		return err
	}
	if err := makeCgroup(n.cgroup+"/pods", kubeletHierarchies); err != nil {
		return err
	}
	for _, rel := range []string{n.cgroup, n.cgroup + "/pods"} {
		if err := weighCPU(rel, nodeCPUShares()); err != nil {
			return err
		}
	}
	if err := n.writeConfig(pause); err != nil {
		return err
	}
	if err := n.startMountNamespace(ctx); err != nil {
		return err
	}
	n.containerd = n.daemon("containerd", n.bins.containerd, "--config", filepath.Join(n.Dir, "containerd.toml"))
	if err := n.containerd.start(); err != nil {
		return err
	}
	if err := n.waitContainerd(ctx); err != nil {
		return err
	}
	if err := n.ImportImage(ctx, pause); err != nil {
		return err
	}
	n.kubelet = n.daemon("kubelet", n.bins.kubelet,
		"--config="+filepath.Join(n.Dir, "kubelet.yaml"),
		"--kubeconfig="+filepath.Join(n.Dir, "kubelet.kubeconfig"),
		"--hostname-override="+n.Name,
		"--node-ip="+n.IP.String(),
		"--node-labels="+corev1.LabelTopologyZone+"="+n.Cluster.Name+"-zone,mcsd.io/harness-cluster="+n.Cluster.Name,
		"--v=1",
	)
	if err := n.kubelet.start(); err != nil {
		return err
	}
	if err := n.waitReady(ctx); err != nil {
		return err
	}
	n.proxy = n.daemon("kube-proxy", n.bins.proxy, "--config="+filepath.Join(n.Dir, "kube-proxy.yaml"), "--v=1")
	if err := n.proxy.start(); err != nil {
		return err
	}
	return n.waitProxy(ctx)
}

// startMountNamespace starts the node's mount namespace, held by a process
// that does nothing else: unshare makes it (private, so that nothing mounted
// in it shows outside), the node's directories are mounted in place of the
// paths every kubelet and containerd share otherwise, and the holder then
// sleeps until teardown kills it with the node's cgroup.
//
// Those mounts hide whatever the machine keeps under /run, /var/lib,
// /var/log and /tmp, and the node's programs open files of the machine by
// their paths: their binaries (the cache, often inside the checkout), the
// node's configuration, certificates and kubeconfigs (the run's state
// directory). A checkout under /tmp, a cache under /var/lib, a state
// directory under /run would vanish from the node's view. So before the
// node's directories go over those paths, each of the machine's paths the
// node needs that lies below one of them is bound into the node's
// directory at the same place (node/tmp/a/b for /tmp/a/b), and the node's
// directory then goes over the path with it: the node sees those paths as
// the machine does, at the same names, and everything else of /tmp (or
// /run ...) as its own. Same names matter: every path the harness writes
// into a configuration or a command line stays valid inside the node, and
// nothing depends on a process of the machine staying alive (as paths
// through /proc/<pid>/root would) or on a second name for each path.
func (n *RealNode) startMountNamespace(ctx context.Context) error {
	ready := filepath.Join(n.Dir, "mounts-ready")
	mounts, err := n.mountPlan()
	if err != nil {
		return err
	}
	// The script's arguments: the (source, target) pairs to bind in order,
	// --, the file that says the namespace is ready. As arguments, paths
	// need no quoting for the shell.
	var args []string
	for _, m := range mounts {
		args = append(args, m.source, m.target)
	}
	args = append(args, "--", ready)
	script := `set -e
while [ "$1" != -- ]; do mkdir -p "$2"; mount --rbind "$1" "$2"; shift 2; done; shift
mkdir -p /run/netns /var/lib/kubelet /var/log/pods /var/log/containers
: > "$1"
exec sleep infinity
`
	n.holder = n.tracked("mount-namespace", append([]string{
		"nsenter", "--net=" + netns.Path(n.NS.Name), "--",
		"unshare", "--mount", "--propagation", "private", "--",
		"sh", "-c", script, "sh",
	}, args...))
	if err := n.holder.start(); err != nil {
		return err
	}
	return wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		if done, err := n.holder.exited(); done {
			return false, fmt.Errorf("the mount namespace of %s ended: %v\n%s", n.Name, err, n.holder.tail(10))
		}
		_, err := os.Stat(ready)
		return err == nil, nil
	})
}

// daemon is a program of the node: it runs in the node's network and mount
// namespaces and in its daemons cgroup.
func (n *RealNode) daemon(name, path string, args ...string) *process {
	argv := append([]string{
		"nsenter", "--mount=/proc/" + strconv.Itoa(n.holder.pid()) + "/ns/mnt", "--net=" + netns.Path(n.NS.Name), "--",
		path,
	}, args...)
	return n.tracked(name, argv)
}

// tracked is a process of the node that joins the node's daemons cgroup
// before it runs argv, so that neither it nor anything it starts (shims,
// containers) can escape teardown.
func (n *RealNode) tracked(name string, argv []string) *process {
	args := []string{"-c", `while [ "$1" != -- ]; do echo $$ > "$1"; shift; done; shift; exec "$@"`, "sh"}
	args = append(args, procsFiles(n.cgroup+"/daemons")...)
	args = append(args, "--")
	args = append(args, argv...)
	return &process{
		name:    n.Name + "-" + name,
		path:    "/bin/sh",
		args:    args,
		logPath: filepath.Join(n.Dir, name+".log"),
		pidDir:  filepath.Dir(n.Cluster.dir),
		env:     append(os.Environ(), "PATH="+n.bins.containerdDir+":"+os.Getenv("PATH")),
	}
}

// waitContainerd waits until containerd answers on its socket.
func (n *RealNode) waitContainerd(ctx context.Context) error {
	var last string
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		if done, err := n.containerd.exited(); done {
			return false, fmt.Errorf("exited: %v", err)
		}
		if _, err := os.Stat(n.ContainerdSocket()); err != nil {
			last = err.Error()
			return false, nil
		}
		out, err := n.ctr(ctx, "version")
		last = out
		return err == nil, nil
	})
	if err != nil {
		return fmt.Errorf("containerd of %s not answering (last: %s): %w\n%s", n.Name, last, err, n.containerd.tail(20))
	}
	return nil
}

// ctr runs containerd's client against the node's containerd, in the
// namespace the kubelet's pods live in.
func (n *RealNode) ctr(ctx context.Context, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, n.bins.ctr, append([]string{"--address", n.ContainerdSocket(), "--namespace", "k8s.io"}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("ctr %s on %s: %w: %s", strings.Join(args, " "), n.Name, err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// ImportImage imports an image into the node's containerd, where the
// kubelet finds it under its reference (no registry is ever asked).
func (n *RealNode) ImportImage(ctx context.Context, img images.Image) error {
	if _, err := n.ctr(ctx, "images", "import", "--platform", "linux/amd64", img.Path); err != nil {
		return fmt.Errorf("importing %s (%s): %w", img.Ref, img.Path, err)
	}
	return nil
}

// waitReady waits until the kubelet has registered the node and reports it
// Ready (its runtime and CNI are up).
func (n *RealNode) waitReady(ctx context.Context) error {
	var last string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		if done, err := n.kubelet.exited(); done {
			return false, fmt.Errorf("kubelet exited: %v", err)
		}
		obj, err := n.Cluster.Kube.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		for _, cond := range obj.Status.Conditions {
			if cond.Type == corev1.NodeReady {
				last = string(cond.Status) + " " + cond.Reason + ": " + cond.Message
				return cond.Status == corev1.ConditionTrue, nil
			}
		}
		last = "no Ready condition"
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("node %s not Ready (last: %s): %w\n--- kubelet:\n%s\n--- containerd:\n%s", n.Name, last, err, n.kubelet.tail(20), n.containerd.tail(10))
	}
	return nil
}

// waitProxy waits until kube-proxy reports healthy, inside the node.
func (n *RealNode) waitProxy(ctx context.Context) error {
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return n.NS.Dial(ctx, network, addr)
		},
	}}
	var last string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		if done, err := n.proxy.exited(); done {
			return false, fmt.Errorf("kube-proxy exited: %v", err)
		}
		resp, err := client.Get("http://127.0.0.1:10256/healthz")
		if err != nil {
			last = err.Error()
			return false, nil
		}
		resp.Body.Close()
		last = resp.Status
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		return fmt.Errorf("kube-proxy of %s not healthy (last: %s): %w\n%s", n.Name, last, err, n.proxy.tail(20))
	}
	return nil
}

// stop ends the node: kube-proxy and the kubelet, then every process left in
// the node's cgroups (containerd, its shims, every container, the mount
// namespace's holder), which takes the mount namespace and all its mounts
// with it; the cgroups go too.
func (n *RealNode) stop() error {
	for _, p := range []*process{n.proxy, n.kubelet} {
		if p != nil {
			p.stop()
		}
	}
	_, err := killCgroup(n.cgroup)
	for _, p := range []*process{n.containerd, n.holder} {
		if p != nil {
			p.stop()
		}
	}
	return err
}

// PodPID returns a process of a pod running on the node (its sandbox's or a
// container's), found through the pod's cgroup (the kubelet's pod<uid>
// under the node's cgroup root). Its /proc entry shows the pod's network
// namespace (ns/net) and its files (root/): tests query DNS and connect
// from inside the pod as its containers would.
func (n *RealNode) PodPID(pod *corev1.Pod) (int, error) {
	if pod.Spec.NodeName != n.Name {
		return 0, fmt.Errorf("pod %s/%s runs on %q, not %s", pod.Namespace, pod.Name, pod.Spec.NodeName, n.Name)
	}
	want := "pod" + string(pod.UID)
	found := 0
	root := filepath.Join(cgroupBase, trackHierarchy, n.cgroup, "pods")
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil || found != 0 || !d.IsDir() {
			return nil
		}
		if filepath.Base(filepath.Dir(path)) != want {
			return nil
		}
		if pids, _ := cgroupPids(path); len(pids) > 0 {
			found = pids[0]
			return filepath.SkipAll
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	if found == 0 {
		return 0, fmt.Errorf("no process of pod %s/%s (uid %s) runs on %s", pod.Namespace, pod.Name, pod.UID, n.Name)
	}
	return found, nil
}

// PodNS returns the network namespace of a pod running on the node: the
// node's own for a hostNetwork pod.
func (n *RealNode) PodNS(pod *corev1.Pod) (*netns.NS, error) {
	if pod.Spec.HostNetwork {
		return n.NS, nil
	}
	pid, err := n.PodPID(pod)
	if err != nil {
		return nil, err
	}
	return netns.At("/proc/" + strconv.Itoa(pid) + "/ns/net"), nil
}

// RealNode returns the cluster's real node of that name.
func (c *Cluster) RealNode(name string) (*RealNode, error) {
	for _, n := range c.realNodes {
		if n.Name == name {
			return n, nil
		}
	}
	return nil, fmt.Errorf("%s has no real node %q", c.Name, name)
}

// ContainerPIDs returns the processes of one container of a pod on the
// node, by its container ID (containerd://<id> in the pod's status).
func (n *RealNode) ContainerPIDs(pod *corev1.Pod, containerID string) ([]int, error) {
	_, id, ok := strings.Cut(containerID, "://")
	if !ok || id == "" {
		return nil, fmt.Errorf("container ID %q is not <runtime>://<id>", containerID)
	}
	want := "pod" + string(pod.UID)
	var pids []int
	root := filepath.Join(cgroupBase, trackHierarchy, n.cgroup, "pods")
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil || !d.IsDir() || filepath.Base(path) != id || filepath.Base(filepath.Dir(path)) != want {
			return nil
		}
		pids, err = cgroupPids(path)
		if err != nil {
			return err
		}
		return filepath.SkipAll
	})
	if err != nil {
		return nil, err
	}
	if len(pids) == 0 {
		return nil, fmt.Errorf("no process of container %s of pod %s/%s runs on %s", id, pod.Namespace, pod.Name, n.Name)
	}
	return pids, nil
}
