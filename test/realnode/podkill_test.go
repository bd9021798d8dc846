package realnode

import (
	"context"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/mcsd-io/mcsd/test/lib/echopod"
	"github.com/mcsd-io/mcsd/test/lib/harness"
)

// An mcsd pod killed on a node (its process SIGKILLed, as an OOM kill
// would): a TCP connection through a ClusterSetIP from a pod of that node
// keeps working while the kubelet restarts the container, and the node's
// nftables rules are the same once the new process has synced.
func testMCSDPodKilled(t *testing.T) {
	w := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	const ns, name = "podkill", "survivor"
	vip := w.exportedEcho(ctx, t, ns, name)
	m := w.members[0]
	c := m.clients[0]
	node := c.node
	f := openFlow(ctx, t, c, vip)

	pod := mcsdPodOn(ctx, t, m, node.Name)
	before := rules(t, node)
	restarts := pod.Status.ContainerStatuses[0].RestartCount
	pids, err := node.ContainerPIDs(pod, pod.Status.ContainerStatuses[0].ContainerID)
	if err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	for _, pid := range pids {
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatalf("killing mcsd (pid %d) on %s: %v", pid, node.Name, err)
		}
	}
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := m.Kube.CoreV1().Pods(mcsdNamespace).Get(ctx, pod.Name, metav1.GetOptions{})
		return err == nil && p.Status.ContainerStatuses[0].RestartCount > restarts && echopod.Ready(p), nil
	})
	if err != nil {
		t.Fatalf("%s: the killed mcsd on %s was not restarted and Ready: %v\n%s", m.Name, node.Name, err, w.podDiagnosis(ctx, m))
	}
	back := time.Since(killed)
	var after string
	// Ready says the proxier synced from synced informers; the rules are
	// compared once they settle back to what they were.
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		after = rules(t, node)
		return after == before, nil
	})
	if err != nil {
		t.Errorf("the nftables rules of %s differ after mcsd's restart:\n--- before\n%s\n--- after\n%s", node.Name, before, after)
	}
	exchanges, ferr := f.exchanges()
	t.Logf("figure: mcsd on %s killed; its container restarted and Ready after %v; %d exchanges over a connection through %s meanwhile", node.Name, back.Round(10*time.Millisecond), exchanges, vip)
	if ferr != nil {
		t.Errorf("the connection through the ClusterSetIP did not survive: %v", ferr)
	}
	if err := f.close(); err != nil {
		t.Errorf("the connection through the ClusterSetIP did not survive: %v", err)
	}
}

// mcsdPodOn is the member's node agent pod on a node.
func mcsdPodOn(ctx context.Context, t *testing.T, m *member, node string) *corev1.Pod {
	t.Helper()
	pods, err := m.Kube.CoreV1().Pods(mcsdNamespace).List(ctx, metav1.ListOptions{LabelSelector: nodeAgentSelector, FieldSelector: "spec.nodeName=" + node})
	if err != nil || len(pods.Items) != 1 {
		t.Fatalf("%s: the node agent pod on %s: %v (%d pods)", m.Name, node, err, len(pods.Items))
	}
	return &pods.Items[0]
}

// volatile are the parts of an nftables listing that change without a
// rule changing: counters, and the expiry of dynamic set elements.
var volatile = regexp.MustCompile(`counter packets \d+ bytes \d+|expires \S+`)

// rules lists mcsd's nftables tables of a node, without what changes on its
// own: one per IP family the cluster serves, and none of another family
// (mcsd's --ip-families follows the cluster's ServiceCIDR: an IPv4-only
// cluster gets no ip6 table).
func rules(t *testing.T, node *harness.RealNode) string {
	t.Helper()
	var b strings.Builder
	for _, family := range []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol} {
		table := "ip"
		if family == corev1.IPv6Protocol {
			table = "ip6"
		}
		out, err := node.NS.Exec("nft", "list", "table", table, "mcsd")
		served := slices.Contains(node.Cluster.IPFamilies, family)
		switch {
		case served && err != nil:
			t.Fatalf("listing mcsd's %s table on %s: %v", table, node.Name, err)
		case !served && err == nil:
			t.Fatalf("%s has an %s table of mcsd, but its cluster serves only %v", node.Name, table, node.Cluster.IPFamilies)
		}
		b.WriteString(volatile.ReplaceAllString(out, ""))
	}
	return b.String()
}
