package realnode

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/mcsd-io/mcsd/test/lib/echo"
	"github.com/mcsd-io/mcsd/test/lib/harness"
	"github.com/mcsd-io/mcsd/test/lib/netns"
)

// clientNamespace holds the client pods in every member.
const clientNamespace = "clients"

// client is a pod on a real node that the tests ask DNS and connect from:
// inside its network namespace, to the nameserver the kubelet wrote into
// its resolv.conf (the cluster DNS Service), as its own containers would.
type client struct {
	pod        *corev1.Pod
	node       *harness.RealNode
	ns         *netns.NS
	nameserver string
}

func (c *client) String() string { return c.pod.Spec.NodeName + "/" + c.pod.Name }

// startClients runs a client pod on each of the member's nodes (the echo
// image, which also answers as a backend would) and waits until they run.
func (w *world) startClients(ctx context.Context, m *member) error {
	if _, err := m.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: clientNamespace}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	var pods []*corev1.Pod
	for _, n := range m.RealNodes() {
		pod := echoPod(clientNamespace, "client-"+n.Name, m.Name, w.echo.Ref, nil, 8080)
		pod.Spec.NodeSelector = map[string]string{corev1.LabelHostname: n.Name}
		created, err := createPod(ctx, m, pod)
		if err != nil {
			return err
		}
		pods = append(pods, created)
	}
	for _, p := range pods {
		c, err := w.clientOf(ctx, m, p)
		if err != nil {
			return err
		}
		m.clients = append(m.clients, c)
	}
	return nil
}

// createPod creates a pod, waiting out the moment a new namespace has no
// default ServiceAccount yet.
func createPod(ctx context.Context, m *member, pod *corev1.Pod) (*corev1.Pod, error) {
	var created *corev1.Pod
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		var err error
		created, err = m.Kube.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{})
		if apierrors.IsForbidden(err) && strings.Contains(err.Error(), "serviceaccount") {
			return false, nil
		}
		return err == nil, err
	})
	if err != nil {
		return nil, fmt.Errorf("%s: creating pod %s/%s: %w", m.Name, pod.Namespace, pod.Name, err)
	}
	return created, nil
}

// echoPod is a pod of the echo image answering on ports with its identity
// (its address, cluster and name). It requests a little CPU, as a
// workload does: without a request a pod gets the smallest CPU weight, and
// a loaded node leaves its answers waiting for seconds.
func echoPod(namespace, name, cluster, image string, labels map[string]string, ports ...int32) *corev1.Pod {
	var portList []string
	var containerPorts []corev1.ContainerPort
	for _, p := range ports {
		portList = append(portList, strconv.Itoa(int(p)))
		containerPorts = append(containerPorts,
			corev1.ContainerPort{Name: fmt.Sprintf("tcp-%d", p), ContainerPort: p, Protocol: corev1.ProtocolTCP},
			corev1.ContainerPort{Name: fmt.Sprintf("udp-%d", p), ContainerPort: p, Protocol: corev1.ProtocolUDP})
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: labels},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: ptrTo[int64](1),
			Containers: []corev1.Container{{
				Name:  "echo",
				Image: image,
				Ports: containerPorts,
				Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m")},
				},
				Env: []corev1.EnvVar{
					{Name: "POD_IPS", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIPs"}}},
					{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
					{Name: "CLUSTER", Value: cluster},
					{Name: "ECHO_PORTS", Value: strings.Join(portList, ",")},
				},
				ReadinessProbe: &corev1.Probe{
					ProbeHandler:  corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(ports[0])}},
					PeriodSeconds: 1,
				},
			}},
		},
	}
}

// clientOf waits until the pod runs and returns it as a client.
func (w *world) clientOf(ctx context.Context, m *member, pod *corev1.Pod) (*client, error) {
	var p *corev1.Pod
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		var err error
		p, err = m.Kube.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		return err == nil && podReady(p), nil
	})
	if err != nil {
		return nil, fmt.Errorf("%s: pod %s/%s not Ready: %w", m.Name, pod.Namespace, pod.Name, err)
	}
	node, err := m.RealNode(p.Spec.NodeName)
	if err != nil {
		return nil, err
	}
	pid, err := node.PodPID(p)
	if err != nil {
		return nil, err
	}
	resolv, err := os.ReadFile(fmt.Sprintf("/proc/%d/root/etc/resolv.conf", pid))
	if err != nil {
		return nil, fmt.Errorf("reading the resolv.conf of %s/%s: %w", p.Namespace, p.Name, err)
	}
	ns, err := node.PodNS(p)
	if err != nil {
		return nil, err
	}
	c := &client{pod: p, node: node, ns: ns}
	sc := bufio.NewScanner(strings.NewReader(string(resolv)))
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 2 && f[0] == "nameserver" && c.nameserver == "" {
			c.nameserver = net.JoinHostPort(f[1], "53")
		}
	}
	if c.nameserver == "" {
		return nil, fmt.Errorf("the resolv.conf of %s/%s names no nameserver:\n%s", p.Namespace, p.Name, resolv)
	}
	return c, nil
}

// query asks the pod's nameserver, over network ("udp" or "tcp").
func (c *client) query(network, name string, qtype uint16) (*dns.Msg, error) {
	return c.queryServer(network, name, qtype, c.nameserver)
}

// queryServer asks server (HOST:PORT) from inside the pod.
func (c *client) queryServer(network, name string, qtype uint16, server string) (*dns.Msg, error) {
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), qtype)
	var resp *dns.Msg
	err := c.ns.Do(func() error {
		var err error
		resp, _, err = (&dns.Client{Net: network, Timeout: 2 * time.Second}).Exchange(m, server)
		return err
	})
	return resp, err
}

// dial connects from inside the pod.
func (c *client) dial(ctx context.Context, network, address string) (net.Conn, error) {
	return c.ns.Dial(ctx, network, address)
}

// ask connects from the pod to address and returns who answered.
func (c *client) ask(ctx context.Context, network, address string) (echo.Identity, error) {
	conn, err := c.dial(ctx, network, address)
	if err != nil {
		return echo.Identity{}, err
	}
	defer conn.Close()
	if strings.HasPrefix(network, "udp") {
		return echo.AskUDP(ctx, conn)
	}
	return echo.AskTCP(ctx, conn)
}

// awaitClustersetZone waits until every CoreDNS pod of m answers for
// clusterset.local, asked from a client: CoreDNS reads the Corefile join
// changed once the kubelet has updated its ConfigMap volume and its reload
// plugin has seen the change, each pod in its own time, up to a minute or
// two later.
func awaitClustersetZone(ctx context.Context, t *testing.T, m *member) error {
	began := time.Now()
	var last string
	err := wait.PollUntilContextTimeout(ctx, time.Second, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := m.Kube.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: "k8s-app=kube-dns"})
		if err != nil || len(pods.Items) == 0 {
			last = fmt.Sprintf("CoreDNS pods: %d, %v", len(pods.Items), err)
			return false, nil
		}
		for _, p := range pods.Items {
			server := net.JoinHostPort(p.Status.PodIP, "53")
			r, err := m.clients[0].queryServer("udp", "nothing.nowhere.svc.clusterset.local", dns.TypeA, server)
			if err != nil || r.Rcode != dns.RcodeNameError {
				last = fmt.Sprintf("%s at %s: %v %v", p.Name, server, r, err)
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("%s: the cluster DNS does not answer for clusterset.local (%s): %w", m.Name, last, err)
	}
	t.Logf("figure: %s: every CoreDNS pod answers for clusterset.local %v after the clients started", m.Name, time.Since(began).Round(10*time.Millisecond))
	return nil
}
