package kind

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mcsd-io/mcsd/test/lib/ports"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
	"sigs.k8s.io/yaml"

	"github.com/mcsd-io/mcsd/test/lib/fixture"
	"github.com/mcsd-io/mcsd/test/lib/harness"
	"github.com/mcsd-io/mcsd/test/lib/netns"
	"github.com/mcsd-io/mcsd/test/lib/testenv"
)

const repoRoot = "../.."

// The operator's path of the README, on harness clusters instead of kind:
// kubectl apply -k manifests/broker, then in each member kubectl apply -k
// manifests/crds and manifests/mcsd and hack/broker-join.sh, then mcsd's
// two identities started with their shipped arguments, each as its own
// ServiceAccount: the controller (reading its broker credential from the
// Secret the script made) and a node agent, with a token bound to a pod
// on its node as the kubelet mounts it. What each identity may do is
// checked with kubectl auth can-i, and the node agent's writes outside its
// node are refused by the shipped admission policy. A service exported in
// one member is imported in the other and answered by its DNS, and nothing
// either identity asks of its API server is forbidden.
func TestOperatorInstallWithKubectl(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequireCommands(t, "dig")
	kubectlDir := kubectl(t)
	cs := harness.Start(t, harness.Options{Clusters: 2})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	bin, err := fixture.BuildDaemon()
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, c := range cs.All() {
		paths = append(paths, c.KubeconfigPath)
	}
	kubeconfig := strings.Join(paths, string(os.PathListSeparator))
	run := func(name string, args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(ctx, name, args...)
		cmd.Dir = repoRoot
		cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig, "PATH="+kubectlDir+string(os.PathListSeparator)+os.Getenv("PATH"))
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
		}
		return string(out)
	}

	run("kubectl", "--context", cs.Broker.Name, "apply", "-k", "manifests/broker")
	ds, deploy := nodeAgent(t), controller(t)
	for _, env := range []string{"POD_IP", "NODE_NAME", "POD_CIDRS"} {
		if !declaresEnv(ds.Spec.Template.Spec.Containers[0], env) {
			t.Fatalf("the node agent's DaemonSet does not set %s", env)
		}
	}

	type memberRun struct {
		cluster          *harness.Cluster
		node             *harness.Node
		agent, ctrl      *harness.Program
		agentHealth      string
		controllerHealth string
		id               string
	}
	var members []*memberRun
	for _, c := range cs.Members {
		m := &memberRun{cluster: c}
		members = append(members, m)
		run("kubectl", "--context", c.Name, "apply", "-k", "manifests/crds")
		run("kubectl", "--context", c.Name, "apply", "-k", "manifests/mcsd")
		// The kustomize path: mcsd installed above, not by join. The harness
		// clusters run no cluster DNS for join to configure, and no kubelet
		// for join to wait for mcsd's pods.
		out := run("hack/broker-join.sh", "--broker-context", cs.Broker.Name, "--member-context", c.Name,
			"--pod-cidrs", c.PodCIDR.String(), "--broker-server", cs.Broker.Server(), "--broker-kubeconfig-file", filepath.Join(cs.Dir, c.Name+".broker.kubeconfig"),
			"--dns=skip", "--install=false", "--wait=false")
		t.Logf("%s: %s", c.Name, out)
		ns, err := c.Kube.CoreV1().Namespaces().Get(ctx, metav1.NamespaceSystem, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		m.id = string(ns.UID)
		if m.node, err = c.AddNode(ctx); err != nil {
			t.Fatal(err)
		}
		checkPermissions(ctx, t, filepath.Join(kubectlDir, "kubectl"), kubeconfig, c.Name, m.node.Name)

		// The controller as its Deployment runs it, as its ServiceAccount.
		token := strings.TrimSpace(run("kubectl", "--context", c.Name, "-n", "mcsd-system", "create", "token", "mcsd-controller", "--duration=1h"))
		controllerKubeconfig := filepath.Join(cs.Dir, c.Name+"-mcsd-controller.kubeconfig")
		if err := c.WriteKubeconfig(controllerKubeconfig, c.TokenConfig(token)); err != nil {
			t.Fatal(err)
		}
		health := freeAddr(t)
		m.controllerHealth = "http://" + health
		ctrlArgs := expand(t, withoutFlags(deploy.Spec.Template.Spec.Containers[0].Args, "--health-address", "--metrics-address"), nil)
		ctrlArgs = append(ctrlArgs,
			"--kubeconfig="+controllerKubeconfig,
			"--health-address="+health,
			"--metrics-address="+freeAddr(t),
		)
		if m.ctrl, err = cs.StartProgram("mcsd-controller-"+c.Name, bin, ctrlArgs...); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = m.ctrl.Terminate(10 * time.Second) })

		// The node agent as its DaemonSet runs it: with a token bound to
		// its pod on the node, as the kubelet mounts it, so that the API
		// server names the node in it.
		agentPod := nodeAgentPod(ctx, t, c.Kube, "mcsd-system", m.node.Name)
		token = strings.TrimSpace(run("kubectl", "--context", c.Name, "-n", "mcsd-system", "create", "token", "mcsd-node-agent", "--duration=1h",
			"--bound-object-kind=Pod", "--bound-object-name="+agentPod.Name, "--bound-object-uid="+string(agentPod.UID)))
		agentKubeconfig := filepath.Join(cs.Dir, c.Name+"-mcsd-node-agent.kubeconfig")
		if err := c.WriteKubeconfig(agentKubeconfig, c.TokenConfig(token)); err != nil {
			t.Fatal(err)
		}
		checkNodeReports(ctx, t, c, "mcsd-system", token, m.node.Name)
		health = freeAddr(t)
		m.agentHealth = "http://" + health
		env := map[string]string{"POD_IP": m.node.IP.String(), "NODE_NAME": m.node.Name, "POD_CIDRS": c.PodCIDR.String()}
		// The DaemonSet's pod has one network namespace; here the data
		// plane is in the node's and the HTTP endpoints stay in the
		// test's, where the test reaches them. No kube-proxy pins flows
		// to this process: it stops without the shutdown delay.
		agentArgs := expand(t, withoutFlags(ds.Spec.Template.Spec.Containers[0].Args, "--health-address", "--metrics-address", "--shutdown-delay-duration"), env)
		agentArgs = append(agentArgs,
			"--kubeconfig="+agentKubeconfig,
			"--netns="+netns.Path(m.node.NS.Name),
			"--node-name="+m.node.Name,
			"--ip-families=IPv4",
			"--health-address="+health,
			// Both clusters' node agents share the test's loopback.
			"--metrics-address="+freeAddr(t),
		)
		if m.agent, err = cs.StartProgram("mcsd-node-agent-"+c.Name, bin, agentArgs...); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = m.agent.Terminate(10 * time.Second) })
	}
	for _, m := range members {
		waitReady(ctx, t, m.ctrl, m.controllerHealth)
		waitReady(ctx, t, m.agent, m.agentHealth)
	}

	// A service of cluster2, exported as an operator would.
	exporting, importing := members[1], members[0]
	const ns, name = "smoke", "echo"
	for _, m := range members {
		if _, err := m.cluster.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	createService(ctx, t, exporting.cluster.Kube, ns, name, exporting.cluster.PodCIDR.Addr().Next().Next().String())
	cmd := exec.CommandContext(ctx, filepath.Join(kubectlDir, "kubectl"), "--context", exporting.cluster.Name, "apply", "-f", "-")
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig)
	cmd.Stdin = strings.NewReader(fmt.Sprintf("apiVersion: multicluster.x-k8s.io/v1beta1\nkind: ServiceExport\nmetadata:\n  name: %s\n  namespace: %s\n", name, ns))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("applying the ServiceExport: %v\n%s", err, out)
	}

	var ip string
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		se, err := exporting.cluster.MCS.MulticlusterV1beta1().ServiceExports(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil || !meta.IsStatusConditionTrue(se.Status.Conditions, string(mcsv1beta1.ServiceExportConditionReady)) {
			return false, nil
		}
		si, err := importing.cluster.MCS.MulticlusterV1beta1().ServiceImports(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil || len(si.Spec.IPs) == 0 {
			return false, nil
		}
		ip = si.Spec.IPs[0]
		return true, nil
	})
	if err != nil {
		t.Fatalf("the export of %s never became a ServiceImport with a ClusterSetIP in %s: %v\n%s\n%s", exporting.cluster.Name, importing.cluster.Name, err,
			exporting.ctrl.Tail(30), importing.ctrl.Tail(30))
	}
	t.Logf("ServiceImport %s/%s in %s: ClusterSetIP %s", ns, name, importing.cluster.Name, ip)

	// The DNS server of the importing node answers the clusterset name.
	fqdn := name + "." + ns + ".svc.clusterset.local"
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		out, err := importing.node.NS.Exec("dig", "+short", "+time=1", "+tries=1", "-p", dnsPort(t, ds), "@"+importing.node.IP.String(), fqdn)
		return err == nil && strings.TrimSpace(out) == ip, nil
	})
	if err != nil {
		t.Fatalf("dig %s at %s:%s did not answer %s: %v", fqdn, importing.node.IP, dnsPort(t, ds), ip, err)
	}

	// Nothing either identity did was refused.
	for _, m := range members {
		checkNothingRefused(t, m.ctrl, m.agent)
		if _, err := m.cluster.Kube.CoordinationV1().Leases("mcsd-system").Get(ctx, "mcsd-node-"+m.node.Name, metav1.GetOptions{}); err != nil {
			t.Errorf("%s: the node agent wrote no report of its node: %v", m.cluster.Name, err)
		}
		if _, err := m.cluster.Kube.CoordinationV1().Leases("mcsd-system").Get(ctx, "mcsd-controllers", metav1.GetOptions{}); err != nil {
			t.Errorf("%s: no leader-election Lease: %v", m.cluster.Name, err)
		}
	}

	// The script declared each member and gave it a namespace with its
	// own quota of the shipped budget.
	for _, m := range members {
		decl, err := cs.Broker.Kube.CoreV1().ConfigMaps("mcsd-broker").Get(ctx, "mcsd-member-"+m.id, metav1.GetOptions{})
		if err != nil || decl.Data["podCIDRs"] != m.cluster.PodCIDR.String() {
			t.Errorf("declaration of %s: %v, %v", m.cluster.Name, decl.Data, err)
		}
		quota, err := cs.Broker.Kube.CoreV1().ResourceQuotas("mcsd-broker-"+m.id).Get(ctx, "mcsd-member", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got := quota.Spec.Hard["count/serviceimports.multicluster.x-k8s.io"]; got.Value() != 2000 {
			t.Errorf("quota of %s's export records: %s, want 2000", m.cluster.Name, got.String())
		}
	}

	// The kubeconfig the script wrote is the member's identity and no
	// other: writing another cluster's records is refused.
	cfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(cs.Dir, exporting.cluster.Name+".broker.kubeconfig"))
	if err != nil {
		t.Fatal(err)
	}
	brokerAs := kubernetes.NewForConfigOrDie(cfg)
	_, err = brokerAs.CoreV1().ConfigMaps("mcsd-broker").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
		Name: "not-mine", Labels: map[string]string{mcsv1beta1.LabelSourceCluster: importing.id}}}, metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) && !apierrors.IsInvalid(err) {
		t.Errorf("%s wrote a record labelled with %s's cluster ID: %v", exporting.cluster.Name, importing.cluster.Name, err)
	}
}

// checkNothingRefused fails the test when a program's log says the API
// server refused it something.
func checkNothingRefused(t *testing.T, progs ...*harness.Program) {
	t.Helper()
	forbidden := regexp.MustCompile(`(?i)forbidden|cannot (get|list|watch|create|update|delete) resource|denied request`)
	for _, prog := range progs {
		data, err := os.ReadFile(prog.LogPath())
		if err != nil {
			t.Fatal(err)
		}
		if loc := forbidden.FindIndex(data); loc != nil {
			start, end := max(loc[0]-300, 0), min(loc[1]+300, len(data))
			t.Errorf("%s was refused something:\n%s", prog.LogPath(), data[start:end])
		}
	}
}

// kubectl returns the directory of the kubectl the test runs: the one on
// PATH, or else one built at the harness's Kubernetes version (once, into
// the cache of test/tools/build.sh).
func kubectl(t *testing.T) string {
	t.Helper()
	if path, err := exec.LookPath("kubectl"); err == nil {
		return filepath.Dir(path)
	}
	path, err := harness.KubernetesTool("kubectl")
	if err != nil {
		t.Fatalf("no kubectl on PATH, and building one failed: %v", err)
	}
	return filepath.Dir(path)
}

// nodeAgent and controller are the shipped workloads of manifests/mcsd.
func nodeAgent(t *testing.T) *appsv1.DaemonSet {
	var ds appsv1.DaemonSet
	readManifest(t, "manifests/mcsd/node-agent.yaml", &ds)
	oneContainer(t, "the node agent's DaemonSet", ds.Spec.Template)
	return &ds
}

func controller(t *testing.T) *appsv1.Deployment {
	var d appsv1.Deployment
	readManifest(t, "manifests/mcsd/controller.yaml", &d)
	oneContainer(t, "the controller's Deployment", d.Spec.Template)
	return &d
}

func oneContainer(t *testing.T, what string, tmpl corev1.PodTemplateSpec) {
	t.Helper()
	if n := len(tmpl.Spec.Containers); n != 1 {
		t.Fatalf("%s has %d containers, want 1", what, n)
	}
}

// readManifest reads the first object of file into obj.
func readManifest(t *testing.T, file string, obj any) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot, file))
	if err != nil {
		t.Fatal(err)
	}
	first, _, _ := strings.Cut(string(data), "\n---\n")
	if err := yaml.UnmarshalStrict([]byte(first), obj); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
}

func declaresEnv(c corev1.Container, name string) bool {
	for _, e := range c.Env {
		if e.Name == name {
			return true
		}
	}
	return false
}

// dnsPort is the port the node agent's DNS listens on, from its arguments.
func dnsPort(t *testing.T, ds *appsv1.DaemonSet) string {
	t.Helper()
	for _, a := range ds.Spec.Template.Spec.Containers[0].Args {
		if v, ok := strings.CutPrefix(a, "--dns-listen="); ok {
			i := strings.LastIndex(v, ":")
			return v[i+1:]
		}
	}
	t.Fatal("the node agent has no --dns-listen")
	return ""
}

// withoutFlags drops the arguments of the named flags (--name=value).
func withoutFlags(args []string, names ...string) []string {
	var out []string
	for _, a := range args {
		name, _, _ := strings.Cut(a, "=")
		if !slices.Contains(names, name) {
			out = append(out, a)
		}
	}
	return out
}

func freeAddr(t *testing.T) string {
	t.Helper()
	port, err := ports.Free()
	if err != nil {
		t.Fatal(err)
	}
	return "127.0.0.1:" + strconv.Itoa(port)
}

// expand replaces $(VAR) in args as the kubelet does, failing on a
// variable the test does not know.
func expand(t *testing.T, args []string, env map[string]string) []string {
	t.Helper()
	ref := regexp.MustCompile(`\$\(([A-Z_]+)\)`)
	var out []string
	for _, a := range args {
		out = append(out, ref.ReplaceAllStringFunc(a, func(m string) string {
			v, ok := env[m[2:len(m)-1]]
			if !ok {
				t.Fatalf("argument %q refers to %s, which the test does not set", a, m)
			}
			return v
		}))
	}
	return out
}

func waitReady(ctx context.Context, t *testing.T, prog *harness.Program, health string) {
	t.Helper()
	client := &http.Client{Timeout: time.Second}
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		if done, err := prog.Exited(); done {
			return false, fmt.Errorf("mcsd exited: %v", err)
		}
		resp, err := client.Get(health + "/readyz")
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		t.Fatalf("mcsd not ready: %v\n%s", err, prog.Tail(40))
	}
}

// createService makes a ClusterIP Service with one ready endpoint, as a
// Deployment and the EndpointSlice controller would.
func createService(ctx context.Context, t *testing.T, kube kubernetes.Interface, ns, name, addr string) {
	t.Helper()
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.ServiceSpec{
			Type:  corev1.ServiceTypeClusterIP,
			Ports: []corev1.ServicePort{{Name: "http", Port: 8080, Protocol: corev1.ProtocolTCP}},
		},
	}
	if _, err := kube.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-1", Labels: map[string]string{
			discoveryv1.LabelServiceName: name, discoveryv1.LabelManagedBy: "smoke-test"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{addr}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](8080), Protocol: ptr.To(corev1.ProtocolTCP)}},
	}
	if _, err := kube.DiscoveryV1().EndpointSlices(ns).Create(ctx, slice, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}
