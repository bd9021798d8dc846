package realnode

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/mcsd-io/mcsd/test/lib/echopod"
	"github.com/mcsd-io/mcsd/test/lib/harness"
)

// clientNamespace holds the client pods in every member.
const clientNamespace = "clients"

// client is a pod on a real node that the tests ask DNS and connect from.
type client struct {
	*echopod.Client
	node *harness.RealNode
}

// startClients runs a client pod on each of the member's nodes (the echo
// image, which also answers as a backend would) and waits until they run.
func (w *world) startClients(ctx context.Context, m *member) error {
	if _, err := m.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: clientNamespace}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	var pods []*corev1.Pod
	for _, n := range m.RealNodes() {
		pod := echopod.Spec(clientNamespace, "client-"+n.Name, m.Name, w.echo.Ref, nil, 8080)
		pod.Spec.NodeSelector = map[string]string{corev1.LabelHostname: n.Name}
		created, err := echopod.Create(ctx, m.Kube, m.Name, pod)
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

// clientOf waits until the pod runs and returns it as a client.
func (w *world) clientOf(ctx context.Context, m *member, pod *corev1.Pod) (*client, error) {
	p, err := echopod.AwaitReady(ctx, m.Kube, m.Name, pod, 5*time.Minute)
	if err != nil {
		return nil, err
	}
	node, err := m.RealNode(p.Spec.NodeName)
	if err != nil {
		return nil, err
	}
	pid, err := node.PodPID(p)
	if err != nil {
		return nil, err
	}
	ns, err := node.PodNS(p)
	if err != nil {
		return nil, err
	}
	c, err := echopod.ClientOf(p, pid, ns)
	if err != nil {
		return nil, err
	}
	return &client{Client: c, node: node}, nil
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
			r, err := m.clients[0].QueryServer("udp", "nothing.nowhere.svc.clusterset.local", dns.TypeA, server)
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
