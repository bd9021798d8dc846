package kind

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

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

	"github.com/mcsd-io/mcsd/test/fixture"
	"github.com/mcsd-io/mcsd/test/harness"
	"github.com/mcsd-io/mcsd/test/netns"
	"github.com/mcsd-io/mcsd/test/testenv"
)

const repoRoot = "../.."

// The operator's path of the README, on harness clusters instead of kind:
// kubectl apply -k manifests/broker, hack/broker-join.sh for each member,
// kubectl apply -k manifests/mcsd, then mcsd started with the DaemonSet's
// own arguments, as the DaemonSet's ServiceAccount, reading its broker
// credential from the Secret the script made. A service exported in one
// member is imported in the other and answered by its DNS, and nothing
// mcsd asks of either API server is forbidden: the RBAC of manifests/mcsd
// and the broker's member Role are enough.
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
	ds := daemonSet(t)
	args := ds.Spec.Template.Spec.Containers[0].Args
	for _, env := range []string{"POD_IP", "NODE_NAME", "POD_CIDRS"} {
		if !declaresEnv(ds, env) {
			t.Fatalf("the DaemonSet does not set %s", env)
		}
	}

	type memberRun struct {
		cluster *harness.Cluster
		node    *harness.Node
		prog    *harness.Program
		health  string
		id      string
	}
	var members []*memberRun
	for _, c := range cs.Members {
		m := &memberRun{cluster: c}
		members = append(members, m)
		run("kubectl", "--context", c.Name, "apply", "-k", "manifests/mcsd")
		// The harness clusters run no cluster DNS for join to configure.
		out := run("hack/broker-join.sh", "--broker-context", cs.Broker.Name, "--member-context", c.Name,
			"--pod-cidrs", c.PodCIDR.String(), "--broker-server", cs.Broker.Server(), "--broker-kubeconfig-file", filepath.Join(cs.Dir, c.Name+".broker.kubeconfig"),
			"--dns=skip")
		t.Logf("%s: %s", c.Name, out)
		ns, err := c.Kube.CoreV1().Namespaces().Get(ctx, metav1.NamespaceSystem, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		m.id = string(ns.UID)

		// What the DaemonSet's ServiceAccount may do, no more.
		sa := "system:serviceaccount:mcsd-system:mcsd"
		for check, want := range map[string]string{
			"list serviceexports.multicluster.x-k8s.io -A":                      "yes",
			"create serviceimports.multicluster.x-k8s.io -n default":            "yes",
			"get secret/mcsd-broker -n mcsd-system":                             "yes",
			"get secret/other -n mcsd-system":                                   "no",
			"list secrets -A":                                                   "no",
			"update serviceexports.multicluster.x-k8s.io -n default":            "no",
			"delete clusterproperties.about.k8s.io":                             "no",
			"update leases.coordination.k8s.io/mcsd-controllers -n mcsd-system": "yes",
			"update leases.coordination.k8s.io/mcsd-node-n1 -n mcsd-system":     "yes",
			"update leases.coordination.k8s.io/other -n default":                "no",
			"update configmaps/mcsd-clusterset-liveness -n mcsd-system":         "yes",
			"update configmaps/other -n mcsd-system":                            "no",
			"list configmaps -A":                                                "no",
		} {
			cmd := exec.CommandContext(ctx, filepath.Join(kubectlDir, "kubectl"), append([]string{"--context", c.Name, "auth", "can-i", "--as", sa}, strings.Fields(check)...)...)
			cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig)
			out, _ := cmd.Output()
			if got := strings.TrimSpace(string(out)); got != want {
				t.Errorf("%s: can mcsd %s? %q, want %q", c.Name, check, got, want)
			}
		}

		// mcsd as the DaemonSet runs it, as its ServiceAccount.
		token := strings.TrimSpace(run("kubectl", "--context", c.Name, "-n", "mcsd-system", "create", "token", "mcsd", "--duration=1h"))
		saKubeconfig := filepath.Join(cs.Dir, c.Name+"-mcsd.kubeconfig")
		if err := c.WriteKubeconfig(saKubeconfig, c.TokenConfig(token)); err != nil {
			t.Fatal(err)
		}
		if m.node, err = c.AddNode(ctx); err != nil {
			t.Fatal(err)
		}
		healthPort, err := harness.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		metricsPort, err := harness.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		env := map[string]string{"POD_IP": m.node.IP.String(), "NODE_NAME": m.node.Name, "POD_CIDRS": c.PodCIDR.String()}
		daemonArgs := expand(t, args, env)
		// The DaemonSet's pod has one network namespace; here the data
		// plane is in the node's and the HTTP endpoints stay in the
		// test's, where the test reaches them.
		m.health = "http://127.0.0.1:" + strconv.Itoa(healthPort)
		daemonArgs = append(daemonArgs,
			"--kubeconfig="+saKubeconfig,
			"--netns="+netns.Path(m.node.NS.Name),
			"--node-name="+m.node.Name,
			"--ip-families=IPv4",
			"--health-address=127.0.0.1:"+strconv.Itoa(healthPort),
			"--metrics-address=127.0.0.1:"+strconv.Itoa(metricsPort),
		)
		if m.prog, err = cs.StartProgram("mcsd-"+c.Name, bin, daemonArgs...); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = m.prog.Terminate(10 * time.Second) })
	}
	for _, m := range members {
		waitReady(ctx, t, m.prog, m.health)
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
			exporting.prog.Tail(30), importing.prog.Tail(30))
	}
	t.Logf("ServiceImport %s/%s in %s: ClusterSetIP %s", ns, name, importing.cluster.Name, ip)

	// The DNS server of the importing node answers the clusterset name.
	fqdn := name + "." + ns + ".svc.clusterset.local"
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		out, err := importing.node.NS.Exec("dig", "+short", "+time=1", "+tries=1", "-p", "5353", "@"+importing.node.IP.String(), fqdn)
		return err == nil && strings.TrimSpace(out) == ip, nil
	})
	if err != nil {
		t.Fatalf("dig %s at %s:5353 did not answer %s: %v", fqdn, importing.node.IP, ip, err)
	}

	// Nothing either daemon did was refused.
	forbidden := regexp.MustCompile(`(?i)forbidden|cannot (get|list|watch|create|update|delete) resource`)
	for _, m := range members {
		data, err := os.ReadFile(m.prog.LogPath())
		if err != nil {
			t.Fatal(err)
		}
		if loc := forbidden.FindIndex(data); loc != nil {
			start, end := max(loc[0]-300, 0), min(loc[1]+300, len(data))
			t.Errorf("mcsd of %s was refused something:\n%s", m.cluster.Name, data[start:end])
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

func daemonSet(t *testing.T) *appsv1.DaemonSet {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot, "manifests/mcsd/daemonset.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var ds appsv1.DaemonSet
	if err := yaml.UnmarshalStrict(data, &ds); err != nil {
		t.Fatal(err)
	}
	if len(ds.Spec.Template.Spec.Containers) != 1 {
		t.Fatalf("the DaemonSet has %d containers, want 1", len(ds.Spec.Template.Spec.Containers))
	}
	return &ds
}

func declaresEnv(ds *appsv1.DaemonSet, name string) bool {
	for _, e := range ds.Spec.Template.Spec.Containers[0].Env {
		if e.Name == name {
			return true
		}
	}
	return false
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
