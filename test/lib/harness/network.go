package harness

import (
	"context"
	"fmt"
	"net/netip"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/mcsd-io/mcsd/test/lib/netns"
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
//
// Nodes and pods of clusters with IPv6 get IPv6 addresses too (see
// families.go), routed the same way: the node of an IPv6-only cluster has
// only its IPv6 uplink address, a dual-stack node both.
type Network struct {
	prefix string
	fabric *netns.NS

	mu    sync.Mutex
	nodes []*Node
	// gateway connects real nodes with the API servers (gateway.go); nil
	// in runs without real nodes, as is operator.
	gateway  *gateway
	operator *netns.NS
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
	g := n.gateway
	n.mu.Unlock()
	if g != nil {
		g.close()
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, node := range n.nodes {
		node.deletePods()
		_ = node.NS.Delete()
	}
	n.nodes = nil
	if n.operator != nil {
		_ = n.operator.Delete()
	}
	_ = n.fabric.Delete()
}

// Node is a harness node: a network namespace standing in for a machine, and
// the Node object that represents it in its cluster.
type Node struct {
	Name    string
	Cluster *Cluster
	// NS is the node's network namespace: pods' traffic is routed through it.
	NS *netns.NS
	// IP is the node's address on the fabric, of its cluster's first IP
	// family; IPs has one per family, in the cluster's order.
	IP  netip.Addr
	IPs []netip.Addr
	// PodSubnet is where this node's pods get their addresses of the first
	// family; PodSubnets has one per family.
	PodSubnet  netip.Prefix
	PodSubnets []netip.Prefix

	// real nodes run a kubelet (RealNode): the harness adds no pods there.
	real bool

	mu      sync.Mutex
	nextPod int
	pods    map[string]*Pod
}

// AddNode creates a node in the cluster: its namespace, its uplink and
// routes to and from every other node of the run, and its Node object.
func (c *Cluster) AddNode(ctx context.Context) (*Node, error) {
	node, err := c.addNodeNetwork()
	if err != nil {
		return nil, err
	}
	if err := node.register(ctx); err != nil {
		return nil, err
	}
	return node, nil
}

// addNodeNetwork creates a node's namespace, its uplink and the routes to
// and from every other node of the run.
func (c *Cluster) addNodeNetwork() (*Node, error) {
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
		Name:    name,
		Cluster: c,
		NS:      ns,
		nextPod: 2,
		pods:    map[string]*Pod{},
	}
	for _, f := range c.IPFamilies {
		if f == corev1.IPv6Protocol {
			node.IPs = append(node.IPs, nodeIPv6(global))
			node.PodSubnets = append(node.PodSubnets, podSubnetV6(c.Index, c.nodes))
		} else {
			node.IPs = append(node.IPs, netip.AddrFrom4([4]byte{100, 64, 0, byte(global)}))
			node.PodSubnets = append(node.PodSubnets, podSubnetV4(c.Index, c.nodes))
		}
	}
	node.IP, node.PodSubnet = node.IPs[0], node.PodSubnets[0]
	if err := node.plumb(net); err != nil {
		_ = ns.Delete()
		return nil, fmt.Errorf("wiring node %s: %w", name, err)
	}
	// Each family's pod subnets are routed between the nodes that have
	// that family, via their uplink addresses of the family.
	for _, other := range net.nodes {
		for k, ip := range node.IPs {
			for j, otherIP := range other.IPs {
				if ip.Is4() != otherIP.Is4() {
					continue
				}
				if _, err := other.NS.IP("route", "add", node.PodSubnets[k].String(), "via", ip.String()); err != nil {
					_ = ns.Delete()
					return nil, err
				}
				if _, err := ns.IP("route", "add", other.PodSubnets[j].String(), "via", otherIP.String()); err != nil {
					_ = ns.Delete()
					return nil, err
				}
			}
		}
	}
	if err := net.routeToNode(node); err != nil {
		_ = ns.Delete()
		return nil, err
	}
	net.nodes = append(net.nodes, node)
	return node, nil
}

// register creates the Node object of a node without a kubelet, with the
// status a kubelet would post.
func (node *Node) register(ctx context.Context) error {
	c, name := node.Cluster, node.Name
	obj := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
			corev1.LabelHostname:      name,
			corev1.LabelTopologyZone:  c.Name + "-zone",
			"mcsd.io/harness-cluster": c.Name,
		}},
		Spec: corev1.NodeSpec{PodCIDR: node.PodSubnet.String()},
	}
	for _, s := range node.PodSubnets {
		obj.Spec.PodCIDRs = append(obj.Spec.PodCIDRs, s.String())
	}
	created, err := c.Kube.CoreV1().Nodes().Create(ctx, obj, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		created, err = c.Kube.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	}
	if err != nil {
		return fmt.Errorf("creating Node %s: %w", name, err)
	}
	created.Status.Addresses = nil
	for _, ip := range node.IPs {
		created.Status.Addresses = append(created.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: ip.String()})
	}
	created.Status.Addresses = append(created.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeHostName, Address: name})
	created.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "HarnessNode", LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}
	if _, err := c.Kube.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("setting status of Node %s: %w", name, err)
	}
	return nil
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
	sysctls := map[string]string{
		"net.ipv4.ip_forward":             "1",
		"net.ipv4.conf.all.rp_filter":     "0",
		"net.ipv4.conf.default.rp_filter": "0",
	}
	var addrs [][]string
	for _, ip := range node.IPs {
		if ip.Is4() {
			addrs = append(addrs,
				[]string{"addr", "add", ip.String() + "/24", "dev", "uplink"},
				[]string{"addr", "add", podGateway + "/32", "dev", "lo"})
			continue
		}
		// No duplicate address detection: the addresses are unique by
		// construction, and usable at once.
		addrs = append(addrs, []string{"addr", "add", ip.String() + "/64", "dev", "uplink", "nodad"})
		for key, value := range map[string]string{
			"net.ipv6.conf.all.disable_ipv6":     "0",
			"net.ipv6.conf.default.disable_ipv6": "0",
			"net.ipv6.conf.all.forwarding":       "1",
			"net.ipv6.conf.default.forwarding":   "1",
			"net.ipv6.conf.all.accept_dad":       "0",
			"net.ipv6.conf.default.accept_dad":   "0",
		} {
			sysctls[key] = value
		}
	}
	// Sysctls first: the "default" ones apply to the pod veths made later.
	for key, value := range sysctls {
		if err := node.NS.Sysctl(key, value); err != nil {
			return err
		}
	}
	for _, s := range addrs {
		if _, err := node.NS.IP(s...); err != nil {
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
