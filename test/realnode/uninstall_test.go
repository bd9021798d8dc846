package realnode

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
)

// Uninstall as the README says, in its order: the ServiceExports, then in
// each member the node agents' DaemonSet, mcsd --cleanup on each node (a
// kubectl debug node pod of mcsd's image, which every node holds), kubectl
// mcs leave (the membership, the clusterset.local block of CoreDNS and
// the rest of mcsd) and kubectl delete -k manifests/crds; finally kubectl delete -k manifests/broker and the
// namespace of broker install's probes. Afterwards no node has an nftables
// table or iptables chain of mcsd, and no cluster has its CRDs or
// namespaces. It runs last: nothing is installed after it.
func testUninstall(t *testing.T) {
	w := setup(t)
	defer func() { w.uninstalled = true }()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	for _, m := range w.members {
		if _, err := w.kubectl(ctx, "", "--context", m.Name, "delete", "serviceexports.multicluster.x-k8s.io", "--all", "--all-namespaces"); err != nil {
			t.Fatal(err)
		}
	}
	for _, m := range w.members {
		// The node agents go first; their rules stay until --cleanup.
		if _, err := w.kubectl(ctx, "", "--context", m.Name, "-n", mcsdNamespace, "delete", "daemonset", nodeAgentDaemonSet, "--cascade=foreground", "--wait"); err != nil {
			t.Fatal(err)
		}
		awaitNoPods(ctx, t, m, nodeAgentSelector)
		for _, n := range m.RealNodes() {
			w.cleanupNode(ctx, t, m, n.Name)
		}
		// leave takes back the rest of what join did: the membership, the
		// DNS block, mcsd's objects; it keeps the CRDs.
		if _, err := w.kubectl(ctx, "", "mcs", "leave", "--broker-context", w.cs.Broker.Name, "--context", m.Name); err != nil {
			t.Fatal(err)
		}
		awaitGone(ctx, t, m.Name, func(ctx context.Context) error {
			_, err := m.Kube.CoreV1().Namespaces().Get(ctx, mcsdNamespace, metav1.GetOptions{})
			return err
		})
		cm, err := m.Kube.CoreV1().ConfigMaps("kube-system").Get(ctx, "coredns", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got := cm.Data["Corefile"]; got != corefileMain {
			t.Errorf("%s: leave left the Corefile:\n%s", m.Name, got)
		}
		if _, err := w.kubectl(ctx, "", "--context", m.Name, "delete", "-k", "manifests/crds", "--wait"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := w.kubectl(ctx, "", "--context", w.cs.Broker.Name, "delete", "-k", "manifests/broker", "--wait"); err != nil {
		t.Fatal(err)
	}
	if _, err := w.kubectl(ctx, "", "--context", w.cs.Broker.Name, "delete", "namespace", "mcsd-broker-mcsd-install-probe", "--wait"); err != nil {
		t.Fatal(err)
	}

	for _, m := range w.members {
		for _, n := range m.RealNodes() {
			tables, err := n.NS.Exec("nft", "list", "tables")
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(tables, "mcsd") {
				t.Errorf("%s keeps an nftables table of mcsd:\n%s", n.Name, tables)
			}
			for _, save := range []string{"iptables-save", "ip6tables-save"} {
				out, err := n.NS.Exec(save)
				if err != nil {
					t.Fatalf("%s: %s: %v", n.Name, save, err)
				}
				if strings.Contains(out, "MCSD") {
					t.Errorf("%s keeps iptables chains of mcsd (%s):\n%s", n.Name, save, out)
				}
			}
		}
	}
	for _, c := range w.cs.All() {
		kube := c.Kube
		for _, crd := range []string{"serviceexports.multicluster.x-k8s.io", "serviceimports.multicluster.x-k8s.io", "clusterproperties.about.k8s.io"} {
			awaitGone(ctx, t, c.Name+" CRD "+crd, func(ctx context.Context) error {
				_, err := c.APIExtensions.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, crd, metav1.GetOptions{})
				return err
			})
		}
		// mcsd-system in members; mcsd-broker and every member's
		// mcsd-broker-<cluster-id> on the broker.
		var left []string
		err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
			list, err := kube.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
			if err != nil {
				return false, nil
			}
			left = nil
			for _, ns := range list.Items {
				if strings.HasPrefix(ns.Name, "mcsd-") {
					left = append(left, ns.Name)
				}
			}
			return len(left) == 0, nil
		})
		if err != nil {
			t.Errorf("%s keeps namespaces of mcsd: %v", c.Name, left)
		}
		if rest := leftoverRBAC(ctx, kube); rest != "" {
			t.Errorf("%s keeps RBAC of mcsd: %s", c.Name, rest)
		}
	}
}

// cleanupNode runs mcsd --cleanup on a node as the README says: a pod of
// mcsd's image in the node's network namespace (kubectl debug node, with
// the netadmin profile: NET_ADMIN, as the node agent has), in mcsd's
// namespace, whose Pod Security allows it; its log says what it removed,
// and it is deleted afterwards.
func (w *world) cleanupNode(ctx context.Context, t *testing.T, m *member, node string) {
	t.Helper()
	out, err := w.kubectl(ctx, "", "--context", m.Name, "-n", mcsdNamespace, "debug", "node/"+node, "--image="+w.mcsd[0].Ref, "--profile=netadmin", "--arguments-only", "--", "--cleanup")
	if err != nil {
		t.Fatal(err)
	}
	match := debugPod.FindStringSubmatch(out)
	if match == nil {
		t.Fatalf("%s: kubectl debug named no pod:\n%s", node, out)
	}
	pod := match[1]
	var phase corev1.PodPhase
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := m.Kube.CoreV1().Pods(mcsdNamespace).Get(ctx, pod, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		phase = p.Status.Phase
		return phase == corev1.PodSucceeded || phase == corev1.PodFailed, nil
	})
	logs, _ := m.Kube.CoreV1().Pods(mcsdNamespace).GetLogs(pod, &corev1.PodLogOptions{}).DoRaw(ctx)
	if err != nil || phase != corev1.PodSucceeded {
		t.Errorf("%s: mcsd --cleanup in pod %s: phase %s, %v\n%s", node, pod, phase, err, logs)
	} else {
		t.Logf("%s: %s", node, strings.TrimSpace(string(logs)))
	}
	if err := m.Kube.CoreV1().Pods(mcsdNamespace).Delete(ctx, pod, metav1.DeleteOptions{}); err != nil {
		t.Error(err)
	}
}

// awaitNoPods waits until no pod of selector is left in mcsd's namespace.
func awaitNoPods(ctx context.Context, t *testing.T, m *member, selector string) {
	t.Helper()
	var left int
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := m.Kube.CoreV1().Pods(mcsdNamespace).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return false, nil
		}
		left = len(pods.Items)
		return left == 0, nil
	})
	if err != nil {
		t.Fatalf("%s: %d pods %s left: %v", m.Name, left, selector, err)
	}
}

// debugPod finds the pod's name in kubectl debug's output.
var debugPod = regexp.MustCompile(`debugging pod (\S+) with container`)

// awaitGone waits until get reports NotFound.
func awaitGone(ctx context.Context, t *testing.T, what string, get func(context.Context) error) {
	t.Helper()
	var last error
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		last = get(ctx)
		return apierrors.IsNotFound(last), nil
	})
	if err != nil {
		t.Errorf("%s is not gone (last: %v): %v", what, last, err)
	}
}

// leftoverRBAC names the cluster-scoped RBAC objects of mcsd left.
func leftoverRBAC(ctx context.Context, kube kubernetes.Interface) string {
	var left []string
	roles, err := kube.RbacV1().ClusterRoles().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err.Error()
	}
	for _, r := range roles.Items {
		if strings.HasPrefix(r.Name, "mcsd") {
			left = append(left, "ClusterRole "+r.Name)
		}
	}
	bindings, err := kube.RbacV1().ClusterRoleBindings().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err.Error()
	}
	for _, b := range bindings.Items {
		if strings.HasPrefix(b.Name, "mcsd") {
			left = append(left, "ClusterRoleBinding "+b.Name)
		}
	}
	return strings.Join(left, ", ")
}
