package kind

import (
	"context"
	"net/netip"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/restmapper"
	"k8s.io/utils/ptr"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	aboutv1beta1 "github.com/mcsd-io/mcsd/apis/about/v1beta1"
	"github.com/mcsd-io/mcsd/broker"
	"github.com/mcsd-io/mcsd/charts"
	"github.com/mcsd-io/mcsd/kubectlmcs/membership"
	"github.com/mcsd-io/mcsd/test/lib/fixture"
	"github.com/mcsd-io/mcsd/test/lib/harness"
	"github.com/mcsd-io/mcsd/test/lib/netns"
	"github.com/mcsd-io/mcsd/test/lib/testenv"
)

// The Helm chart's path, with values away from the defaults: the chart's
// CRDs and its objects rendered into namespace mcs (cluster ID, pod CIDRs,
// IP family, DNS port, broker Secret, controller replicas) are applied to a
// real API server, the member joins the broker with that Secret, and both
// identities run with the arguments and ServiceAccounts the chart gives
// them. The node-report policy binds the node agent of namespace mcs to its
// node; a service exported there is imported with a ClusterSetIP and
// answered by the node agent's DNS on the chart's port; nothing either
// identity asks is refused. helm test's identity reads what its probe
// reads and nothing else, and its pod meets the restricted profile.
func TestChartInstall(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequireCommands(t, "dig")
	cs := harness.Start(t, harness.Options{Clusters: 1})
	c := cs.Members[0]
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	bin, err := fixture.BuildDaemon()
	if err != nil {
		t.Fatal(err)
	}
	if err := broker.Install(ctx, cs.Broker.Config, broker.Settings{}); err != nil {
		t.Fatal(err)
	}

	const ns, clusterID, dnsPort, secret = "mcs", "east", 10371, "broker-east"
	values := map[string]any{
		"namespace":  map[string]any{"create": true},
		"clusterID":  clusterID,
		"podCIDRs":   []any{c.PodCIDR.String()},
		"ipFamilies": []any{"IPv4"},
		"ports":      map[string]any{"dns": dnsPort},
		"controller": map[string]any{"replicas": 1, "brokerSecret": secret},
	}
	objs, err := charts.Objects(ns, values)
	if err != nil {
		t.Fatal(err)
	}
	chart, err := charts.Load()
	if err != nil {
		t.Fatal(err)
	}
	var crds []*unstructured.Unstructured
	for _, f := range chart.CRDObjects() {
		docs, err := charts.Documents(f.File.Data)
		if err != nil {
			t.Fatalf("%s: %v", f.Filename, err)
		}
		crds = append(crds, docs...)
	}
	applyObjects(ctx, t, c, crds)
	applied := applyObjects(ctx, t, c, objs)
	if applied < 15 {
		t.Fatalf("only %d objects applied; the chart's rendering looks wrong", applied)
	}
	checkTestHook(ctx, t, c, ns, values)
	var ds appsv1.DaemonSet
	var deploy appsv1.Deployment
	for _, o := range objs {
		switch o.GetKind() {
		case "DaemonSet":
			fromUnstructured(t, o, &ds)
		case "Deployment":
			fromUnstructured(t, o, &deploy)
		}
	}
	if got, err := c.Kube.AppsV1().Deployments(ns).Get(ctx, "mcsd-controller", metav1.GetOptions{}); err != nil || *got.Spec.Replicas != 1 {
		t.Fatalf("the controller's Deployment in %s: %v", ns, err)
	}

	res, err := membership.Join(ctx, cs.Broker.Config, c.Config, membership.Options{
		ClusterID: clusterID, PodCIDRs: []netip.Prefix{c.PodCIDR}, BrokerServer: cs.Broker.Server(), NoSecret: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Kube.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: secret},
		Data: map[string][]byte{membership.SecretKey: res.Kubeconfig}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	node, err := c.AddNode(ctx)
	if err != nil {
		t.Fatal(err)
	}

	token := createToken(ctx, t, c, ns, "mcsd-controller")
	controllerKubeconfig := filepath.Join(cs.Dir, "chart-mcsd-controller.kubeconfig")
	if err := c.WriteKubeconfig(controllerKubeconfig, c.TokenConfig(token)); err != nil {
		t.Fatal(err)
	}
	controllerHealth := freeAddr(t)
	ctrlArgs := expand(t, withoutFlags(deploy.Spec.Template.Spec.Containers[0].Args, "--health-address", "--metrics-address"), nil)
	ctrlArgs = append(ctrlArgs, "--kubeconfig="+controllerKubeconfig, "--health-address="+controllerHealth, "--metrics-address="+freeAddr(t))
	ctrl, err := cs.StartProgram("chart-mcsd-controller", bin, ctrlArgs...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ctrl.Terminate(10 * time.Second) })

	agentPod := nodeAgentPod(ctx, t, c.Kube, ns, node.Name)
	token = createToken(ctx, t, c, ns, "mcsd-node-agent", agentPod)
	checkNodeReports(ctx, t, c, ns, token, node.Name)
	agentKubeconfig := filepath.Join(cs.Dir, "chart-mcsd-node-agent.kubeconfig")
	if err := c.WriteKubeconfig(agentKubeconfig, c.TokenConfig(token)); err != nil {
		t.Fatal(err)
	}
	agentHealth := freeAddr(t)
	env := map[string]string{"POD_IP": node.IP.String(), "POD_CIDRS": envValue(t, ds, "POD_CIDRS")}
	if env["POD_CIDRS"] != c.PodCIDR.String() {
		t.Fatalf("the chart's POD_CIDRS is %q, want %s", env["POD_CIDRS"], c.PodCIDR)
	}
	// No kube-proxy pins flows to this process: it stops without the
	// shutdown delay.
	agentArgs := expand(t, withoutFlags(ds.Spec.Template.Spec.Containers[0].Args, "--health-address", "--metrics-address", "--shutdown-delay-duration"), env)
	agentArgs = append(agentArgs, "--kubeconfig="+agentKubeconfig, "--netns="+netns.Path(node.NS.Name), "--node-name="+node.Name,
		"--health-address="+agentHealth, "--metrics-address="+freeAddr(t))
	agent, err := cs.StartProgram("chart-mcsd-node-agent", bin, agentArgs...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = agent.Terminate(10 * time.Second) })
	waitReady(ctx, t, ctrl, "http://"+controllerHealth)
	waitReady(ctx, t, agent, "http://"+agentHealth)

	// A service of this member, exported: every member imports, the
	// exporting one too.
	const svcNS, name = "smoke", "echo"
	if _, err := c.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: svcNS}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	createService(ctx, t, c.Kube, svcNS, name, c.PodCIDR.Addr().Next().Next().String())
	if _, err := c.MCS.MulticlusterV1beta1().ServiceExports(svcNS).Create(ctx, &mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: svcNS, Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var ip string
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		se, err := c.MCS.MulticlusterV1beta1().ServiceExports(svcNS).Get(ctx, name, metav1.GetOptions{})
		if err != nil || !meta.IsStatusConditionTrue(se.Status.Conditions, string(mcsv1beta1.ServiceExportConditionReady)) {
			return false, nil
		}
		si, err := c.MCS.MulticlusterV1beta1().ServiceImports(svcNS).Get(ctx, name, metav1.GetOptions{})
		if err != nil || len(si.Spec.IPs) == 0 {
			return false, nil
		}
		ip = si.Spec.IPs[0]
		return true, nil
	})
	if err != nil {
		t.Fatalf("the export never became a ServiceImport with a ClusterSetIP: %v\n%s", err, ctrl.Tail(30))
	}
	fqdn := name + "." + svcNS + ".svc.clusterset.local"
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		out, err := node.NS.Exec("dig", "+short", "+time=1", "+tries=1", "-p", strconv.Itoa(dnsPort), "@"+node.IP.String(), fqdn)
		return err == nil && strings.TrimSpace(out) == ip, nil
	})
	if err != nil {
		t.Fatalf("dig %s at %s:%d did not answer %s: %v\n%s", fqdn, node.IP, dnsPort, ip, err, agent.Tail(30))
	}

	checkNothingRefused(t, ctrl, agent)
	for _, lease := range []string{"mcsd-node-" + node.Name, "mcsd-controllers"} {
		if _, err := c.Kube.CoordinationV1().Leases(ns).Get(ctx, lease, metav1.GetOptions{}); err != nil {
			t.Errorf("no Lease %s/%s: %v", ns, lease, err)
		}
	}
	if cp, err := c.Dynamic.Resource(aboutv1beta1.SchemeGroupVersion.WithResource(aboutv1beta1.Resource)).Get(ctx, "cluster.clusterset.k8s.io", metav1.GetOptions{}); err != nil {
		t.Errorf("no cluster ID recorded: %v", err)
	} else if v, _, _ := unstructured.NestedString(cp.Object, "spec", "value"); v != clusterID {
		t.Errorf("cluster ID %q recorded, want the chart's %q", v, clusterID)
	}
}

// checkTestHook creates what helm test creates before its pod (the test's
// identity) and checks that the identity may read what mcsd probe install
// reads and nothing else, and that the test's pod is admitted by the
// restricted Pod Security profile.
func checkTestHook(ctx context.Context, t *testing.T, c *harness.Cluster, ns string, values map[string]any) {
	t.Helper()
	hooks, err := charts.TestHooks(ns, values)
	if err != nil {
		t.Fatal(err)
	}
	var identity []*unstructured.Unstructured
	var pod corev1.Pod
	for _, h := range hooks {
		if h.GetKind() == "Pod" {
			fromUnstructured(t, h, &pod)
			continue
		}
		identity = append(identity, h)
	}
	if applyObjects(ctx, t, c, identity) != 3 || pod.Name == "" {
		t.Fatalf("helm test's objects: %d before a pod %q, want its ServiceAccount, Role and RoleBinding", len(identity), pod.Name)
	}

	probe := kubernetes.NewForConfigOrDie(c.TokenConfig(createToken(ctx, t, c, ns, pod.Spec.ServiceAccountName)))
	for what, call := range map[string]func() error{
		"get the node agents' DaemonSet": func() error {
			_, err := probe.AppsV1().DaemonSets(ns).Get(ctx, "mcsd-node-agent", metav1.GetOptions{})
			return err
		},
		"get the controller's Deployment": func() error {
			_, err := probe.AppsV1().Deployments(ns).Get(ctx, "mcsd-controller", metav1.GetOptions{})
			return err
		},
		"get the Service mcsd-dns": func() error {
			_, err := probe.CoreV1().Services(ns).Get(ctx, "mcsd-dns", metav1.GetOptions{})
			return err
		},
		"list the pods": func() error {
			_, err := probe.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=mcsd"})
			return err
		},
	} {
		if err := call(); err != nil {
			t.Errorf("helm test's identity may not %s: %v", what, err)
		}
	}
	for what, call := range map[string]func() error{
		"list Secrets": func() error {
			_, err := probe.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{})
			return err
		},
		"list DaemonSets": func() error {
			_, err := probe.AppsV1().DaemonSets(ns).List(ctx, metav1.ListOptions{})
			return err
		},
		"delete a pod": func() error {
			return probe.CoreV1().Pods(ns).Delete(ctx, "mcsd-test", metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
		},
		"list pods elsewhere": func() error {
			_, err := probe.CoreV1().Pods(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{})
			return err
		},
	} {
		if err := call(); !apierrors.IsForbidden(err) {
			t.Errorf("helm test's identity may %s: %v, want it forbidden", what, err)
		}
	}

	restricted := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "chart-test-restricted", Labels: map[string]string{"pod-security.kubernetes.io/enforce": "restricted"}}}
	if _, err := c.Kube.CoreV1().Namespaces().Create(ctx, restricted, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod.Namespace, pod.Spec.ServiceAccountName = restricted.Name, ""
	if _, err := c.Kube.CoreV1().Pods(restricted.Name).Create(ctx, &pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
		t.Errorf("helm test's pod is refused by the restricted profile: %v", err)
	}
}

// applyObjects applies objs to cluster c (server-side apply, not a dry
// run), waiting for each CRD to be established, and returns how many it
// applied.
func applyObjects(ctx context.Context, t *testing.T, c *harness.Cluster, objs []*unstructured.Unstructured) int {
	t.Helper()
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(c.Kube.Discovery()))
	for _, obj := range objs {
		gvk := obj.GroupVersionKind()
		mapping, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			t.Fatalf("%s %s: %v", gvk, obj.GetName(), err)
		}
		var res interface {
			Apply(context.Context, string, *unstructured.Unstructured, metav1.ApplyOptions, ...string) (*unstructured.Unstructured, error)
		} = c.Dynamic.Resource(mapping.Resource)
		if ns := obj.GetNamespace(); ns != "" {
			res = c.Dynamic.Resource(mapping.Resource).Namespace(ns)
		}
		if _, err := res.Apply(ctx, obj.GetName(), obj, metav1.ApplyOptions{FieldManager: "chart-install", Force: true}); err != nil {
			t.Fatalf("%s %s refused: %v", gvk.Kind, obj.GetName(), err)
		}
	}
	return len(objs)
}

func fromUnstructured(t *testing.T, o *unstructured.Unstructured, into any) {
	t.Helper()
	if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(o.Object, into, true); err != nil {
		t.Fatalf("%s %s: %v", o.GetKind(), o.GetName(), err)
	}
}

func envValue(t *testing.T, ds appsv1.DaemonSet, name string) string {
	t.Helper()
	for _, e := range ds.Spec.Template.Spec.Containers[0].Env {
		if e.Name == name {
			return e.Value
		}
	}
	t.Fatalf("the node agent's DaemonSet sets no %s", name)
	return ""
}

// createToken makes a token of ServiceAccount ns/sa, bound to pod when one
// is given (as the kubelet mounts it: the API server then names the pod's
// node in it).
func createToken(ctx context.Context, t *testing.T, c *harness.Cluster, ns, sa string, pod ...*corev1.Pod) string {
	t.Helper()
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}
	if len(pod) == 1 {
		req.Spec.BoundObjectRef = &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod[0].Name, UID: pod[0].UID}
	}
	tok, err := c.Kube.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, req, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("a token of %s/%s: %v", ns, sa, err)
	}
	return tok.Status.Token
}
