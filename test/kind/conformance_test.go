package kind

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	mcsclient "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned"

	"github.com/mcsd-io/mcsd/test/lib/conformance"
	"github.com/mcsd-io/mcsd/test/lib/echopod"
	"github.com/mcsd-io/mcsd/test/lib/harness"
	"github.com/mcsd-io/mcsd/test/lib/netns"
)

const (
	// The kind clusters of the end-to-end test: the first is the broker
	// and a member.
	kindCluster1 = "mcsd-kind1"
	kindCluster2 = "mcsd-kind2"
	// clientNamespace holds the pods the suite asks from.
	clientNamespace = "kind-clients"
	// mcsdDNSPort is the node agent's DNS port on its node's address (the
	// chart's ports.dns).
	mcsdDNSPort = 10271
)

// kindPlatform runs the conformance suite's pods in the kind clusters:
// echo pods the scheduler places, and a client pod on every node, which
// the suite asks from inside its network namespace.
type kindPlatform struct {
	echo       string
	members    []conformance.Member
	names      []string
	requesters [][]conformance.Requester
}

// newKindPlatform connects to both clusters through the engine's network
// namespace, where kind publishes their API servers, and starts the
// client pods.
func newKindPlatform(ctx context.Context, t *testing.T, k *kindEnv, echo string) *kindPlatform {
	t.Helper()
	p := &kindPlatform{echo: echo}
	for _, name := range []string{kindCluster1, kindCluster2} {
		cfg, err := k.restConfig("kind-" + name)
		if err != nil {
			t.Fatal(err)
		}
		kube := kubernetes.NewForConfigOrDie(cfg)
		dyn := dynamic.NewForConfigOrDie(cfg)
		id, err := conformance.RecordedClusterID(ctx, dyn, name)
		if err != nil {
			t.Fatal(err)
		}
		p.members = append(p.members, conformance.Member{ID: id, Kube: kube, MCS: mcsclient.NewForConfigOrDie(cfg)})
		p.names = append(p.names, name)
		requesters, err := startClients(ctx, kube, name, echo)
		if err != nil {
			t.Fatal(err)
		}
		p.requesters = append(p.requesters, requesters)
	}
	return p
}

// restConfig is the kubeconfig context's client configuration, dialling
// from the engine's network namespace.
func (k *kindEnv) restConfig(context string) (*rest.Config, error) {
	var kubeconfig string
	for _, kv := range k.env {
		if v, ok := strings.CutPrefix(kv, "KUBECONFIG="); ok {
			kubeconfig = v
		}
	}
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(
		&clientcmd.ClientConfigLoadingRules{ExplicitPath: kubeconfig},
		&clientcmd.ConfigOverrides{CurrentContext: context}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("context %s of %s: %w", context, kubeconfig, err)
	}
	if k.engine.NetNS != nil {
		cfg.Dial = k.engine.NetNS.Dial
	}
	cfg.QPS, cfg.Burst = 50, 100
	return cfg, nil
}

func (p *kindPlatform) Members() []conformance.Member { return p.members }

func (p *kindPlatform) Families() []corev1.IPFamily { return harness.IPv4Only }

func (p *kindPlatform) AddPod(ctx context.Context, i int, spec conformance.PodSpec) (conformance.Pod, error) {
	return echopod.Start(ctx, p.members[i].Kube, p.names[i], p.echo, spec)
}

func (p *kindPlatform) Requesters(_ *conformance.Env, i int) ([]conformance.Requester, error) {
	return p.requesters[i], nil
}

// startClients runs a client pod (the echo image) on each node of the
// cluster and returns them as requesters once they run.
func startClients(ctx context.Context, kube kubernetes.Interface, cluster, image string) ([]conformance.Requester, error) {
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: clientNamespace}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, err
	}
	nodes, err := kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	var out []conformance.Requester
	for _, n := range nodes.Items {
		pod := echopod.Spec(clientNamespace, "client-"+n.Name, cluster, image, nil)
		pod.Spec.NodeSelector = map[string]string{corev1.LabelHostname: n.Name}
		pod.Spec.Tolerations = []corev1.Toleration{{Operator: corev1.TolerationOpExists}}
		created, err := echopod.Create(ctx, kube, cluster, pod)
		if err != nil {
			return nil, err
		}
		ready, err := echopod.AwaitReady(ctx, kube, cluster, created, 5*time.Minute)
		if err != nil {
			return nil, err
		}
		pid, err := podPID(ctx, cluster, ready.Name)
		if err != nil {
			return nil, err
		}
		c, err := echopod.ClientOf(ready, pid, netns.At(fmt.Sprintf("/proc/%d/ns/net", pid)))
		if err != nil {
			return nil, err
		}
		node, err := netip.ParseAddr(ready.Status.HostIP)
		if err != nil {
			return nil, fmt.Errorf("%s: pod %s has no host address: %w", cluster, ready.Name, err)
		}
		out = append(out, echopod.Requester{Client: c, MCSD: netip.AddrPortFrom(node, mcsdDNSPort).String()})
	}
	return out, nil
}

// podPID finds, among this machine's processes, the echo server of the
// cluster's pod: kind's containers run on this kernel, and the echo
// server's environment names its pod and cluster.
func podPID(ctx context.Context, cluster, pod string) (int, error) {
	want := [][]byte{[]byte("POD_NAME=" + pod + "\x00"), []byte("CLUSTER=" + cluster + "\x00")}
	var pid int
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		procs, err := filepath.Glob("/proc/[0-9]*/environ")
		if err != nil {
			return false, err
		}
		for _, path := range procs {
			env, err := os.ReadFile(path)
			if err != nil {
				continue
			}
			if bytes.Contains(env, want[0]) && bytes.Contains(env, want[1]) {
				pid, err = strconv.Atoi(strings.Split(path, "/")[2])
				return err == nil, err
			}
		}
		return false, nil
	})
	if err != nil {
		return 0, fmt.Errorf("%s: no process of pod %s on this machine: %w", cluster, pod, err)
	}
	return pid, nil
}
