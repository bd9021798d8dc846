package kind

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/mcsd-io/mcsd/test/lib/harness"
)

// The identities of manifests/mcsd.
const (
	nodeAgentSA  = "system:serviceaccount:mcsd-system:mcsd-node-agent"
	controllerSA = "system:serviceaccount:mcsd-system:mcsd-controller"
)

// checkPermissions asks the API server with kubectl auth can-i what each
// identity may do: the node agent reads and writes nothing cluster-wide
// (its Lease writes are bound to its node by admission, which can-i does
// not ask: checkNodeReports does), and the controller alone holds the
// broker credential and the writes.
func checkPermissions(ctx context.Context, t *testing.T, kubectl, kubeconfig, cluster, node string) {
	t.Helper()
	for _, tc := range []struct{ as, check, want string }{
		// The node agent reads what DNS and the proxier serve...
		{nodeAgentSA, "list serviceimports.multicluster.x-k8s.io -A", "yes"},
		{nodeAgentSA, "watch endpointslices.discovery.k8s.io -A", "yes"},
		{nodeAgentSA, "get configmaps/mcsd-clusterset-liveness -n mcsd-system", "yes"},
		{nodeAgentSA, "get clusterproperties.about.k8s.io/cluster.clusterset.k8s.io", "yes"},
		{nodeAgentSA, "watch leases.coordination.k8s.io/mcsd-dns-gate -n mcsd-system", "yes"},
		{nodeAgentSA, "get servicecidrs.networking.k8s.io/kubernetes", "yes"},
		{nodeAgentSA, "update leases.coordination.k8s.io/mcsd-node-" + node + " -n mcsd-system", "yes"},
		// ... and writes none of it, nor sees the broker credential.
		{nodeAgentSA, "create endpointslices.discovery.k8s.io -n default", "no"},
		{nodeAgentSA, "update endpointslices.discovery.k8s.io -n default", "no"},
		{nodeAgentSA, "delete endpointslices.discovery.k8s.io -n default", "no"},
		{nodeAgentSA, "create serviceimports.multicluster.x-k8s.io -n default", "no"},
		{nodeAgentSA, "update serviceimports.multicluster.x-k8s.io -n default", "no"},
		{nodeAgentSA, "delete serviceimports.multicluster.x-k8s.io -n default", "no"},
		{nodeAgentSA, "update serviceimports.multicluster.x-k8s.io --subresource=status -n default", "no"},
		{nodeAgentSA, "create configmaps -n mcsd-system", "no"},
		{nodeAgentSA, "update configmaps/mcsd-clusterset-liveness -n mcsd-system", "no"},
		{nodeAgentSA, "delete configmaps/mcsd-clusterset-liveness -n mcsd-system", "no"},
		{nodeAgentSA, "get secret/mcsd-broker -n mcsd-system", "no"},
		{nodeAgentSA, "list secrets -A", "no"},
		{nodeAgentSA, "create clusterproperties.about.k8s.io", "no"},
		{nodeAgentSA, "update serviceexports.multicluster.x-k8s.io --subresource=status -n default", "no"},
		{nodeAgentSA, "list serviceexports.multicluster.x-k8s.io -A", "no"},
		{nodeAgentSA, "list services -A", "no"},
		// Events on its Node (namespace default), as kube-proxy's
		// system:node-proxier records them; it reads and deletes none.
		{nodeAgentSA, "create events -n default", "yes"},
		{nodeAgentSA, "list events -n default", "no"},
		{nodeAgentSA, "delete events -n default", "no"},
		{nodeAgentSA, "delete leases.coordination.k8s.io/mcsd-node-" + node + " -n mcsd-system", "no"},
		{nodeAgentSA, "update leases.coordination.k8s.io/x -n default", "no"},
		{nodeAgentSA, "list pods -A", "no"},
		// Nor the other nodes' reports, nor their pods: the summary is
		// all it watches.
		{nodeAgentSA, "list leases.coordination.k8s.io -n mcsd-system", "no"},
		{nodeAgentSA, "list pods -n mcsd-system", "no"},
		// Both have the tokens and accesses of scrapes of their /metrics
		// reviewed (system:auth-delegator), as kube-scheduler does.
		{nodeAgentSA, "create tokenreviews.authentication.k8s.io", "yes"},
		{nodeAgentSA, "create subjectaccessreviews.authorization.k8s.io", "yes"},
		{controllerSA, "create tokenreviews.authentication.k8s.io", "yes"},
		{controllerSA, "create subjectaccessreviews.authorization.k8s.io", "yes"},
		// The controller writes what it owns.
		{controllerSA, "list serviceexports.multicluster.x-k8s.io -A", "yes"},
		{controllerSA, "create serviceimports.multicluster.x-k8s.io -n default", "yes"},
		{controllerSA, "delete endpointslices.discovery.k8s.io -n default", "yes"},
		{controllerSA, "get secret/mcsd-broker -n mcsd-system", "yes"},
		{controllerSA, "update leases.coordination.k8s.io/mcsd-controllers -n mcsd-system", "yes"},
		// The DNS gate's summary, from the node agents' reports and pods.
		{controllerSA, "update leases.coordination.k8s.io/mcsd-dns-gate -n mcsd-system", "yes"},
		{controllerSA, "watch leases.coordination.k8s.io -n mcsd-system", "yes"},
		{controllerSA, "list pods -n mcsd-system", "yes"},
		{controllerSA, "update configmaps/mcsd-clusterset-liveness -n mcsd-system", "yes"},
		{controllerSA, "get secret/other -n mcsd-system", "no"},
		{controllerSA, "list secrets -A", "no"},
		{controllerSA, "update serviceexports.multicluster.x-k8s.io -n default", "no"},
		{controllerSA, "delete clusterproperties.about.k8s.io", "no"},
		{controllerSA, "update leases.coordination.k8s.io/mcsd-node-" + node + " -n mcsd-system", "no"},
		{controllerSA, "update leases.coordination.k8s.io/other -n default", "no"},
		{controllerSA, "update configmaps/other -n mcsd-system", "no"},
		{controllerSA, "list configmaps -A", "no"},
		{controllerSA, "create pods -n mcsd-system", "no"},
		{controllerSA, "get servicecidrs.networking.k8s.io/kubernetes", "yes"},
		{controllerSA, "create servicecidrs.networking.k8s.io", "no"},
	} {
		cmd := exec.CommandContext(ctx, kubectl, append([]string{"--context", cluster, "auth", "can-i", "--as", tc.as}, strings.Fields(tc.check)...)...)
		cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig)
		out, _ := cmd.Output()
		if got := strings.TrimSpace(string(out)); got != tc.want {
			t.Errorf("%s: can %s %s? %q, want %q", cluster, tc.as, tc.check, got, tc.want)
		}
	}
}

// nodeAgentPod creates the node agent's pod in namespace ns on node as the
// DaemonSet controller would (nothing runs it here): a token bound to it
// names the node.
func nodeAgentPod(ctx context.Context, t *testing.T, kube kubernetes.Interface, ns, node string) *corev1.Pod {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "mcsd-node-agent-" + node,
			Labels: map[string]string{"app.kubernetes.io/name": "mcsd", "app.kubernetes.io/component": "node-agent"}},
		Spec: corev1.PodSpec{
			NodeName:           node,
			ServiceAccountName: "mcsd-node-agent",
			Containers:         []corev1.Container{{Name: "mcsd", Image: "localhost/mcsd:none"}},
		},
	}
	created, err := kube.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return created
}

// checkNodeReports writes, as the node agent on node (token: bound to its
// pod), Leases in mcsd's namespace ns, dry run: its own node's report is
// admitted, anything else is refused, and so is its own report written
// with a token that names no node.
func checkNodeReports(ctx context.Context, t *testing.T, c *harness.Cluster, ns, podToken, node string) {
	t.Helper()
	agent := kubernetes.NewForConfigOrDie(c.TokenConfig(podToken))
	unbound, err := c.Kube.CoreV1().ServiceAccounts(ns).CreateToken(ctx, "mcsd-node-agent", &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	stolen := kubernetes.NewForConfigOrDie(c.TokenConfig(unbound.Status.Token))
	// The controller's leader-election Lease exists: a node agent must not
	// take it over.
	if _, err := c.Kube.CoordinationV1().Leases(ns).Create(ctx, lease(ns, "mcsd-controllers", "someone"), metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	dry := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	// The API server enforces a ValidatingAdmissionPolicy once its
	// informers have seen the policy and its binding, a moment after they
	// were applied: wait until a write the policy alone refuses is refused.
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := agent.CoordinationV1().Leases(ns).Create(ctx, lease(ns, "mcsd-node-other", "other"), dry)
		return apierrors.IsForbidden(err) || apierrors.IsInvalid(err), nil
	}); err != nil {
		t.Fatalf("%s: the node-report policy was never enforced: the node agent on %s could still write another node's report", c.Name, node)
	}
	for _, tc := range []struct {
		what    string
		client  kubernetes.Interface
		write   func(kubernetes.Interface) error
		allowed bool
	}{
		{"its own node's report", agent, func(k kubernetes.Interface) error {
			_, err := k.CoordinationV1().Leases(ns).Create(ctx, lease(ns, "mcsd-node-"+node, node), dry)
			return err
		}, true},
		{"another node's report", agent, func(k kubernetes.Interface) error {
			_, err := k.CoordinationV1().Leases(ns).Create(ctx, lease(ns, "mcsd-node-other", "other"), dry)
			return err
		}, false},
		{"its own report, held by another node", agent, func(k kubernetes.Interface) error {
			_, err := k.CoordinationV1().Leases(ns).Create(ctx, lease(ns, "mcsd-node-"+node, "other"), dry)
			return err
		}, false},
		{"the controller's leader-election Lease", agent, func(k kubernetes.Interface) error {
			l, err := k.CoordinationV1().Leases(ns).Get(ctx, "mcsd-controllers", metav1.GetOptions{})
			if err != nil {
				return err
			}
			l.Spec.HolderIdentity = ptr.To(node)
			_, err = k.CoordinationV1().Leases(ns).Update(ctx, l, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}})
			return err
		}, false},
		{"the summary of every node's report", agent, func(k kubernetes.Interface) error {
			_, err := k.CoordinationV1().Leases(ns).Create(ctx, lease(ns, "mcsd-dns-gate", node), dry)
			return err
		}, false},
		{"its own node's report with a token bound to no pod", stolen, func(k kubernetes.Interface) error {
			_, err := k.CoordinationV1().Leases(ns).Create(ctx, lease(ns, "mcsd-node-"+node, node), dry)
			return err
		}, false},
	} {
		err := tc.write(tc.client)
		if tc.allowed && err != nil {
			t.Errorf("%s: the node agent on %s may not write %s: %v", c.Name, node, tc.what, err)
		}
		if !tc.allowed && !apierrors.IsForbidden(err) && !apierrors.IsInvalid(err) {
			t.Errorf("%s: the node agent on %s wrote %s: %v, want it refused", c.Name, node, tc.what, err)
		}
		if !tc.allowed && err != nil {
			t.Logf("%s: %s refused: %v", c.Name, tc.what, err)
		}
	}
}

func lease(ns, name, holder string) *coordinationv1.Lease {
	return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(holder)}}
}
