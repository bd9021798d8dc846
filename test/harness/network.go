package harness

import (
	"context"
	"fmt"
	"net/netip"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/mcsd-io/mcsd/test/netns"
)

// Network is the flat pod network all clusters of a run share, as the MCS KEP
// assumes. Every node is a network namespace attached to one "fabric"
// namespace's bridge by its uplink; pods hang off their node by a routed veth
// (no bridge, as with Calico), so every packet a pod sends or receives
// crosses its node's IP stack and netfilter hooks, where a proxier programs
// its rules. Addresses (all inside the run's namespaces):
//
//	node uplinks         100.64.0.<n>/24 on the fabric bridge
//	pods of cluster c    100.<64+c>.<node>.0/24 per node, 100.<64+c>.0.0/16 per cluster
//	services of cluster c 100.<96+c>.0.0/16 (allocated by its API server)
//	pod gateway          169.254.1.1 (on every node's loopback, answered by ARP)
type Network struct {
	prefix string
	fabric *netns.NS

	mu    sync.Mutex
	nodes []*Node
}

const (
	fabricBridge = "fab0"
	podGateway   = "169.254.1.1"
)

func newNetwork(runID string) (*Network, error) {
	prefix := netnsPrefix + runID + "-"
	fabric, err := netns.New(prefix + "fabric")
	if err != nil {
		return nil, err
	}
	n := &Network{prefix: prefix, fabric: fabric}
	if _, err := fabric.IP("link", "add", fabricBridge, "type", "bridge"); err != nil {
		n.close()
		return nil, err
	}
	if _, err := fabric.IP("link", "set", fabricBridge, "up"); err != nil {
		n.close()
		return nil, err
	}
	return n, nil
}

// close deletes every namespace of the run; interfaces and routes go with them.
func (n *Network) close() {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, node := range n.nodes {
		node.deletePods()
		_ = node.NS.Delete()
	}
	n.nodes = nil
	_ = n.fabric.Delete()
}

// Node is a harness node: a network namespace standing in for a machine, and
// the Node object that represents it in its cluster.
type Node struct {
	Name    string
	Cluster *Cluster
	// NS is the node's network namespace: pods' traffic is routed through it.
	NS *netns.NS
	// IP is the node's address on the fabric.
	IP netip.Addr
	// PodSubnet is where this node's pods get their addresses.
	PodSubnet netip.Prefix

	mu      sync.Mutex
	nextPod int
	pods    map[string]*Pod
}

// AddNode creates a node in the cluster: its namespace, its uplink and
// routes to and from every other node of the run, and its Node object.
func (c *Cluster) AddNode(ctx context.Context) (*Node, error) {
	if c.Index == 0 {
		return nil, fmt.Errorf("the broker runs no pods")
	}
	net := c.network
	net.mu.Lock()
	defer net.mu.Unlock()
	global := len(net.nodes) + 1
	c.nodes++
	if global > 250 || c.nodes > 250 {
		return nil, fmt.Errorf("the harness network has room for 250 nodes")
	}
	name := fmt.Sprintf("%s-node%d", c.Name, c.nodes)
	ns, err := netns.New(fmt.Sprintf("%sc%dn%d", net.prefix, c.Index, c.nodes))
	if err != nil {
		return nil, err
	}
	node := &Node{
		Name:      name,
		Cluster:   c,
		NS:        ns,
		IP:        netip.AddrFrom4([4]byte{100, 64, 0, byte(global)}),
		PodSubnet: netip.PrefixFrom(netip.AddrFrom4([4]byte{100, byte(64 + c.Index), byte(c.nodes), 0}), 24),
		nextPod:   2,
		pods:      map[string]*Pod{},
	}
	if err := node.plumb(net); err != nil {
		_ = ns.Delete()
		return nil, fmt.Errorf("wiring node %s: %w", name, err)
	}
	for _, other := range net.nodes {
		if _, err := other.NS.IP("route", "add", node.PodSubnet.String(), "via", node.IP.String()); err != nil {
			_ = ns.Delete()
			return nil, err
		}
		if _, err := ns.IP("route", "add", other.PodSubnet.String(), "via", other.IP.String()); err != nil {
			_ = ns.Delete()
			return nil, err
		}
	}
	net.nodes = append(net.nodes, node)

	obj := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
			corev1.LabelHostname:      name,
			corev1.LabelTopologyZone:  c.Name + "-zone",
			"mcsd.io/harness-cluster": c.Name,
		}},
		Spec: corev1.NodeSpec{PodCIDR: node.PodSubnet.String(), PodCIDRs: []string{node.PodSubnet.String()}},
	}
	created, err := c.Kube.CoreV1().Nodes().Create(ctx, obj, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		created, err = c.Kube.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	}
	if err != nil {
		return nil, fmt.Errorf("creating Node %s: %w", name, err)
	}
	created.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: node.IP.String()}, {Type: corev1.NodeHostName, Address: name}}
	created.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "HarnessNode", LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}
	if _, err := c.Kube.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		return nil, fmt.Errorf("setting status of Node %s: %w", name, err)
	}
	return node, nil
}

func (node *Node) plumb(net *Network) error {
	fabricSide := fmt.Sprintf("n%dx%d", node.Cluster.Index, node.Cluster.nodes)
	if err := netns.Veth(net.fabric, fabricSide, node.NS, "uplink"); err != nil {
		return err
	}
	steps := [][]string{
		{"link", "set", fabricSide, "master", fabricBridge},
	}
	for _, s := range steps {
		if _, err := net.fabric.IP(s...); err != nil {
			return err
		}
	}
	for _, s := range [][]string{
		{"addr", "add", node.IP.String() + "/24", "dev", "uplink"},
		{"addr", "add", podGateway + "/32", "dev", "lo"},
	} {
		if _, err := node.NS.IP(s...); err != nil {
			return err
		}
	}
	for key, value := range map[string]string{
		"net.ipv4.ip_forward":             "1",
		"net.ipv4.conf.all.rp_filter":     "0",
		"net.ipv4.conf.default.rp_filter": "0",
	} {
		if err := node.NS.Sysctl(key, value); err != nil {
			return err
		}
	}
	return nil
}

func (node *Node) deletePods() {
	node.mu.Lock()
	pods := make([]*Pod, 0, len(node.pods))
	for _, p := range node.pods {
		pods = append(pods, p)
	}
	node.mu.Unlock()
	for _, p := range pods {
		p.teardown()
	}
}
