package harness

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/mcsd-io/mcsd/test/lib/echo"
	"github.com/mcsd-io/mcsd/test/lib/netns"
)

// PodSpec describes a harness pod.
type PodSpec struct {
	Namespace string
	Name      string
	Labels    map[string]string
	// Hostname and Subdomain are copied into the Pod spec, so headless
	// Services publish the hostname in their EndpointSlices.
	Hostname  string
	Subdomain string
	// Ports the pod's echo server answers on, TCP and UDP alike.
	// Default: 8080.
	Ports []int32
	// NotReady creates the pod with Ready=False.
	NotReady bool
}

// Pod is a network namespace with an address from each of its node's pod
// subnets, an echo server on each of its ports and addresses, and the Pod
// object whose status the harness writes as a kubelet would (Running,
// Ready, podIPs), so the EndpointSlice controller publishes it.
type Pod struct {
	Namespace, Name string
	// IP is the pod's address of its cluster's first IP family; IPs has
	// one per family, in the cluster's order.
	IP   netip.Addr
	IPs  []netip.Addr
	Node *Node
	NS   *netns.NS

	hostVeth string
	servers  []*echo.Server
}

// AddPod starts a pod on the node.
func (node *Node) AddPod(ctx context.Context, spec PodSpec) (*Pod, error) {
	if spec.Namespace == "" {
		spec.Namespace = metav1.NamespaceDefault
	}
	if len(spec.Ports) == 0 {
		spec.Ports = []int32{8080}
	}
	if node.real {
		return nil, fmt.Errorf("%s runs a kubelet: create a Pod object, the kubelet runs it", node.Name)
	}
	node.mu.Lock()
	if _, taken := node.pods[spec.Namespace+"/"+spec.Name]; taken {
		node.mu.Unlock()
		return nil, fmt.Errorf("pod %s/%s already exists on %s", spec.Namespace, spec.Name, node.Name)
	}
	seq := node.nextPod
	if seq > 254 {
		node.mu.Unlock()
		return nil, fmt.Errorf("node %s has no pod addresses left", node.Name)
	}
	node.nextPod++
	node.mu.Unlock()

	p := &Pod{
		Namespace: spec.Namespace,
		Name:      spec.Name,
		Node:      node,
		hostVeth:  "p" + strconv.Itoa(seq),
	}
	for _, subnet := range node.PodSubnets {
		p.IPs = append(p.IPs, podAddr(subnet, seq))
	}
	p.IP = p.IPs[0]
	ns, err := netns.New(fmt.Sprintf("%sp%d", node.NS.Name, seq))
	if err != nil {
		return nil, err
	}
	p.NS = ns
	if err := p.plumb(); err != nil {
		p.teardown()
		return nil, fmt.Errorf("wiring pod %s/%s: %w", spec.Namespace, spec.Name, err)
	}
	// One echo server per address and port: each answers with the
	// address it was reached on.
	for _, ip := range p.IPs {
		id := echo.Identity{IP: ip.String(), Cluster: node.Cluster.Name, Pod: spec.Name}
		for _, port := range spec.Ports {
			addr := net.JoinHostPort(ip.String(), strconv.Itoa(int(port)))
			tcp, err := ns.Listen("tcp", addr)
			if err != nil {
				p.teardown()
				return nil, err
			}
			udp, err := ns.ListenPacket("udp", addr)
			if err != nil {
				tcp.Close()
				p.teardown()
				return nil, err
			}
			p.servers = append(p.servers, echo.Serve(id, tcp, udp))
		}
	}
	node.mu.Lock()
	node.pods[spec.Namespace+"/"+spec.Name] = p
	node.mu.Unlock()

	if err := p.publish(ctx, spec); err != nil {
		p.teardown()
		return nil, err
	}
	return p, nil
}

func (p *Pod) plumb() error {
	if p.IP6() {
		// Before the veth exists, so that its pod end takes the defaults.
		for key, value := range map[string]string{
			"net.ipv6.conf.all.disable_ipv6":     "0",
			"net.ipv6.conf.default.disable_ipv6": "0",
			"net.ipv6.conf.all.accept_dad":       "0",
			"net.ipv6.conf.default.accept_dad":   "0",
		} {
			if err := p.NS.Sysctl(key, value); err != nil {
				return err
			}
		}
	}
	if err := netns.Veth(p.Node.NS, p.hostVeth, p.NS, "eth0"); err != nil {
		return err
	}
	for _, ip := range p.IPs {
		var pod [][]string
		var node []string
		if ip.Is4() {
			pod = [][]string{
				{"addr", "add", ip.String() + "/32", "dev", "eth0"},
				{"route", "add", podGateway, "dev", "eth0", "scope", "link"},
				{"route", "add", "default", "via", podGateway, "dev", "eth0"},
			}
			node = []string{"route", "add", ip.String() + "/32", "dev", p.hostVeth}
		} else {
			// The node's end of the veth answers for the link-local
			// gateway, as Calico's does; the node routes the pod's
			// address into the veth.
			if _, err := p.Node.NS.IP("-6", "addr", "add", podGateway6+"/64", "dev", p.hostVeth, "nodad"); err != nil {
				return err
			}
			pod = [][]string{
				{"-6", "addr", "add", ip.String() + "/128", "dev", "eth0", "nodad"},
				{"-6", "route", "add", "default", "via", podGateway6, "dev", "eth0"},
			}
			node = []string{"-6", "route", "add", ip.String() + "/128", "dev", p.hostVeth}
		}
		for _, s := range pod {
			if _, err := p.NS.IP(s...); err != nil {
				return err
			}
		}
		if _, err := p.Node.NS.IP(node...); err != nil {
			return err
		}
	}
	return nil
}

// IP6 says whether the pod has an IPv6 address.
func (p *Pod) IP6() bool {
	_, ok := p.IPOf(corev1.IPv6Protocol)
	return ok
}

// publish creates the Pod object and writes the status a kubelet would.
func (p *Pod) publish(ctx context.Context, spec PodSpec) error {
	kube := p.Node.Cluster.Kube
	var containerPorts []corev1.ContainerPort
	for _, port := range spec.Ports {
		containerPorts = append(containerPorts,
			corev1.ContainerPort{Name: fmt.Sprintf("tcp-%d", port), ContainerPort: port, Protocol: corev1.ProtocolTCP},
			corev1.ContainerPort{Name: fmt.Sprintf("udp-%d", port), ContainerPort: port, Protocol: corev1.ProtocolUDP},
		)
	}
	obj := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: spec.Namespace, Name: spec.Name, Labels: spec.Labels},
		Spec: corev1.PodSpec{
			NodeName:                     p.Node.Name,
			Hostname:                     spec.Hostname,
			Subdomain:                    spec.Subdomain,
			AutomountServiceAccountToken: ptr.To(false),
			Containers: []corev1.Container{{
				Name:  "echo",
				Image: "harness.mcsd.invalid/echo",
				Ports: containerPorts,
			}},
		},
	}
	var created *corev1.Pod
	// A new namespace has no default ServiceAccount for a moment, and the
	// ServiceAccount admission plugin refuses pods until it does.
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		var err error
		created, err = kube.CoreV1().Pods(spec.Namespace).Create(ctx, obj, metav1.CreateOptions{})
		if err != nil && (apierrors.IsForbidden(err) || apierrors.IsServerTimeout(err)) && strings.Contains(err.Error(), "serviceaccount") {
			return false, nil
		}
		return err == nil, err
	})
	if err != nil {
		return fmt.Errorf("creating Pod %s/%s: %w", spec.Namespace, spec.Name, err)
	}
	now := metav1.Now()
	var hostIPs []corev1.HostIP
	for _, ip := range p.Node.IPs {
		hostIPs = append(hostIPs, corev1.HostIP{IP: ip.String()})
	}
	var podIPs []corev1.PodIP
	for _, ip := range p.IPs {
		podIPs = append(podIPs, corev1.PodIP{IP: ip.String()})
	}
	created.Status = corev1.PodStatus{
		Phase:     corev1.PodRunning,
		HostIP:    p.Node.IP.String(),
		HostIPs:   hostIPs,
		PodIP:     p.IP.String(),
		PodIPs:    podIPs,
		StartTime: &now,
		Conditions: []corev1.PodCondition{
			{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: now},
		},
		ContainerStatuses: []corev1.ContainerStatus{{
			Name: "echo", Image: "harness.mcsd.invalid/echo", ImageID: "harness", ContainerID: "harness://" + spec.Name,
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}},
		}},
	}
	setReadiness(&created.Status, !spec.NotReady)
	if _, err := kube.CoreV1().Pods(spec.Namespace).UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("setting status of Pod %s/%s: %w", spec.Namespace, spec.Name, err)
	}
	return nil
}

func setReadiness(status *corev1.PodStatus, ready bool) {
	cond := corev1.ConditionFalse
	if ready {
		cond = corev1.ConditionTrue
	}
	now := metav1.Now()
	kept := status.Conditions[:0]
	for _, c := range status.Conditions {
		if c.Type != corev1.PodReady && c.Type != corev1.ContainersReady {
			kept = append(kept, c)
		}
	}
	status.Conditions = append(kept,
		corev1.PodCondition{Type: corev1.ContainersReady, Status: cond, LastTransitionTime: now},
		corev1.PodCondition{Type: corev1.PodReady, Status: cond, LastTransitionTime: now},
	)
	for i := range status.ContainerStatuses {
		status.ContainerStatuses[i].Ready = ready
	}
}

// SetReady flips the pod's readiness, as a failing or recovering readiness
// probe would.
func (p *Pod) SetReady(ctx context.Context, ready bool) error {
	pods := p.Node.Cluster.Kube.CoreV1().Pods(p.Namespace)
	obj, err := pods.Get(ctx, p.Name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	setReadiness(&obj.Status, ready)
	_, err = pods.UpdateStatus(ctx, obj, metav1.UpdateOptions{})
	return err
}

// Dial connects from inside the pod to a literal IP:port.
func (p *Pod) Dial(ctx context.Context, network, address string) (net.Conn, error) {
	return p.NS.Dial(ctx, network, address)
}

// Ask connects from the pod to address and returns the identity of the echo
// server that answered.
func (p *Pod) Ask(ctx context.Context, network, address string) (echo.Identity, error) {
	conn, err := p.Dial(ctx, network, address)
	if err != nil {
		return echo.Identity{}, err
	}
	defer conn.Close()
	if network == "udp" || network == "udp4" || network == "udp6" {
		return echo.AskUDP(ctx, conn)
	}
	return echo.AskTCP(ctx, conn)
}

// Delete removes the Pod object at once (as a kubelet confirming the kill
// would) and then the pod's network namespace.
func (p *Pod) Delete(ctx context.Context) error {
	err := p.Node.Cluster.Kube.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	p.teardown()
	return nil
}

func (p *Pod) teardown() {
	for _, s := range p.servers {
		s.Close()
	}
	p.servers = nil
	if p.NS != nil {
		_ = p.NS.Delete()
	}
	p.Node.mu.Lock()
	delete(p.Node.pods, p.Namespace+"/"+p.Name)
	p.Node.mu.Unlock()
}
