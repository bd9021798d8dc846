package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
	mcsclient "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned"
	"sigs.k8s.io/yaml"

	aboutv1beta1 "github.com/mcsd-io/mcsd/apis/about/v1beta1"
	"github.com/mcsd-io/mcsd/broker"
	"github.com/mcsd-io/mcsd/internal/record"
	"github.com/mcsd-io/mcsd/internal/version"
	"github.com/mcsd-io/mcsd/kubectlmcs/diagnose"
	"github.com/mcsd-io/mcsd/kubectlmcs/membership"
	"github.com/mcsd-io/mcsd/kubectlmcs/status"
	"github.com/mcsd-io/mcsd/liveness"
	"github.com/mcsd-io/mcsd/test/lib/fixture"
	"github.com/mcsd-io/mcsd/test/lib/harness"
	"github.com/mcsd-io/mcsd/vipalloc"
)

// cli runs kubectl-mcs in this process against the harness clusters, whose
// contexts are named broker, cluster1, cluster2.
type cli struct {
	t          *testing.T
	kubeconfig string
}

func (c cli) run(ctx context.Context, args ...string) (stdout, stderr string, err error) {
	var out, errOut bytes.Buffer
	root := newRoot(genericiooptions.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut})
	root.SetArgs(append([]string{"--kubeconfig", c.kubeconfig}, args...))
	err = root.ExecuteContext(ctx)
	return out.String(), errOut.String(), err
}

func (c cli) must(ctx context.Context, args ...string) string {
	c.t.Helper()
	out, errOut, err := c.run(ctx, args...)
	if err != nil {
		c.t.Fatalf("kubectl mcs %s: %v\n%s%s", strings.Join(args, " "), err, out, errOut)
	}
	return out
}

// mergedKubeconfig writes one kubeconfig holding every harness cluster's
// admin context, named after the cluster.
func mergedKubeconfig(t *testing.T, cs *harness.ClusterSet) string {
	t.Helper()
	merged := clientcmdapi.NewConfig()
	for _, c := range cs.All() {
		kc, err := clientcmd.LoadFromFile(c.KubeconfigPath)
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range kc.Clusters {
			merged.Clusters[k] = v
		}
		for k, v := range kc.AuthInfos {
			merged.AuthInfos[k] = v
		}
		for k, v := range kc.Contexts {
			merged.Contexts[k] = v
		}
	}
	merged.CurrentContext = cs.Members[0].Name
	path := filepath.Join(cs.Dir, "all.kubeconfig")
	if err := clientcmd.WriteToFile(*merged, path); err != nil {
		t.Fatal(err)
	}
	return path
}

func (c cli) status(ctx context.Context, args ...string) map[string]status.Cluster {
	c.t.Helper()
	var doc clustersetStatus
	if err := json.Unmarshal([]byte(c.must(ctx, append([]string{"status", "-o", "json"}, args...)...)), &doc); err != nil {
		c.t.Fatal(err)
	}
	byID := map[string]status.Cluster{}
	for _, cl := range doc.Clusters {
		byID[cl.ID] = cl
	}
	return byID
}

// diagnose runs diagnose -o json for a member and returns its checks by
// name and whether the command failed. Harness clusters run no pods: no
// reachability check.
func (c cli) diagnose(ctx context.Context, member string, args ...string) (map[string]diagnose.Check, bool) {
	c.t.Helper()
	out, errOut, err := c.run(ctx, append([]string{"diagnose", "-o", "json", "--context", member, "--skip-reachability"}, args...)...)
	var checks []diagnose.Check
	if jerr := json.Unmarshal([]byte(out), &checks); jerr != nil {
		c.t.Fatalf("diagnose %s: %v, %v\n%s%s", member, err, jerr, out, errOut)
	}
	byName := map[string]diagnose.Check{}
	for _, ch := range checks {
		byName[ch.Name] = ch
	}
	return byName, err != nil
}

// eventually polls f until it returns true.
func eventually(ctx context.Context, t *testing.T, what string, f func() bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) { return f(), nil })
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// failed lists the checks that did not pass. The mcsd-pods check skips on
// the harness, whose mcsd runs as a process, not as pods of the DaemonSet.
func failed(checks map[string]diagnose.Check) []string {
	var names []string
	for n, c := range checks {
		if c.Result != diagnose.Pass && (c.Result != diagnose.Skip || n != "mcsd pods") {
			names = append(names, n+": "+c.Detail)
		}
	}
	return names
}

// The operator's path on harness clusters: the broker installed and both
// members joined with kubectl mcs, mcsd's exporter, heartbeat and importer
// running with the credentials join stored; then status and diagnose on a
// healthy clusterset and on broken ones, each fault repaired before the
// next.
func TestJoinStatusAndDiagnose(t *testing.T) {
	cs := harness.Start(t, harness.Options{Clusters: 2})
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	mcs := cli{t: t, kubeconfig: mergedKubeconfig(t, cs)}
	c1, c2 := cs.Members[0], cs.Members[1]

	out := mcs.must(ctx, "broker", "install", "--broker-context", "broker")
	if !strings.Contains(out, "broker installed") || !strings.Contains(out, "kubectl mcs broker export-rules set NS --members ID[,ID...] --broker-context BROKER") {
		t.Fatalf("broker install said %q, want the broker installed and the export-rules hint", out)
	}

	// cluster1's ID is its kube-system UID; cluster2 has recorded its own.
	ksys, err := c1.Kube.CoreV1().Namespaces().Get(ctx, metav1.NamespaceSystem, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	id1, id2 := string(ksys.UID), "cluster2"
	prop := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": aboutv1beta1.SchemeGroupVersion.String(), "kind": "ClusterProperty",
		"metadata": map[string]any{"name": aboutv1beta1.ClusterIDName}, "spec": map[string]any{"value": id2},
	}}
	if _, err := c2.Dynamic.Resource(aboutv1beta1.SchemeGroupVersion.WithResource(aboutv1beta1.Resource)).Create(ctx, prop, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	members := map[string]*fixture.Member{}
	for _, j := range []struct {
		c  *harness.Cluster
		id string
	}{{c1, id1}, {c2, id2}} {
		// mcsd runs in this process (the fixtures below), as a user's own
		// tooling would install it: join does not.
		out, errOut, err := mcs.run(ctx, "join", "--broker-context", "broker", "--context", j.c.Name, "--pod-cidrs", j.c.PodCIDR.String(), "--install=false", "--wait=false")
		if err != nil {
			t.Fatalf("join %s: %v\n%s", j.c.Name, err, errOut)
		}
		if want := "cluster " + j.id + " joined"; !strings.Contains(out, want) {
			t.Fatalf("join %s said %q, want %q\n%s", j.c.Name, out, want, errOut)
		}
		if want := "export-rules set NS --members " + j.id + "[,ID...]"; !strings.Contains(out, want) {
			t.Errorf("join %s said %q, want the export-rules hint %q", j.c.Name, out, want)
		}
		members[j.c.Name] = member(ctx, t, j.c, j.id)
	}
	m1, m2 := members[c1.Name], members[c2.Name]

	// What mcsd would run: an exporter and heartbeat in each member, an
	// importer in cluster1; a service of cluster2 exported.
	lease := fixture.ExporterOptions{LeaseDuration: 5 * time.Second}
	fixture.StartExporter(t, m1, lease)
	exporter2 := fixture.StartExporter(t, m2, lease)
	fixture.StartImporter(t, m1, fixture.ImporterOptions{})
	const ns, name = "shop", "web"
	for _, c := range []*harness.Cluster{c1, c2} {
		if _, err := c.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	endpoint := c2.PodCIDR.Addr().Next().Next().String()
	exportService(ctx, t, c2, ns, name, endpoint)
	var vip string
	eventually(ctx, t, "the ServiceImport with its ClusterSetIP and endpoints in cluster1", func() bool {
		si, err := c1.MCS.MulticlusterV1beta1().ServiceImports(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil || len(si.Spec.IPs) == 0 {
			return false
		}
		vip = si.Spec.IPs[0]
		slices, err := c1.Kube.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{LabelSelector: mcsv1beta1.LabelSourceCluster + "=" + id2})
		return err == nil && len(slices.Items) > 0
	})

	// CoreDNS of cluster1 forwards clusterset.local with the shipped
	// snippet; cluster2 has none.
	configureCoreDNS(ctx, t, c1)

	t.Run("status of a healthy clusterset", func(t *testing.T) {
		mcs := cli{t: t, kubeconfig: mcs.kubeconfig}
		var clusters map[string]status.Cluster
		eventually(ctx, t, "both clusters live", func() bool {
			clusters = mcs.status(ctx, "--context", "cluster1")
			return clusters[id1].State == liveness.Live && clusters[id2].State == liveness.Live
		})
		if len(clusters) != 2 {
			t.Errorf("status lists %d clusters, want 2: %v", len(clusters), clusters)
		}
		if c := clusters[id2]; c.Exports != 1 || c.Conflicts != 0 || !c.Declared || strings.Join(c.PodCIDRs, ",") != c2.PodCIDR.String() || len(c.Blocks) != 2 {
			t.Errorf("cluster2: %+v, want 1 export, no conflict, declared with %s, two blocks", c, c2.PodCIDR)
		}
		if c := clusters[id1]; c.Exports != 0 || len(c.Blocks) != 2 {
			t.Errorf("cluster1: %+v, want no export and two blocks", c)
		}
		for id, c := range clusters {
			if c.Version != version.Get().Version {
				t.Errorf("%s: mcsd version %q, want the one its heartbeat writes, %q", id, c.Version, version.Get().Version)
			}
		}
		// The administrator's view is the same; the table names both.
		table := mcs.must(ctx, "status", "--broker-context", "broker")
		for _, want := range []string{"CLUSTER", id1, id2, liveness.Live, c2.PodCIDR.String(), liveness.ConfigMapName} {
			if !strings.Contains(table, want) {
				t.Errorf("status table lacks %q:\n%s", want, table)
			}
		}
		t.Logf("kubectl mcs status:\n%s", table)
		svc := mcs.must(ctx, "status", "svc", ns+"/"+name, "--context", "cluster1")
		t.Logf("kubectl mcs status svc:\n%s", svc)
		for _, want := range []string{vip, "http:80/TCP", id2, endpoint, "Ready"} {
			if !strings.Contains(svc, want) {
				t.Errorf("status svc lacks %q:\n%s", want, svc)
			}
		}
		var doc status.Service
		if err := yaml.Unmarshal([]byte(mcs.must(ctx, "status", "svc", ns+"/"+name, "-o", "yaml")), &doc); err != nil {
			t.Fatal(err)
		}
		if len(doc.Exporters) != 1 || doc.Exporters[0].Cluster != id2 || !doc.Exporters[0].Precedence ||
			len(doc.Endpoints) != 1 || doc.Endpoints[0].Cluster != id2 || doc.Endpoints[0].Ready != 1 {
			t.Errorf("status svc -o yaml: %+v", doc)
		}
	})

	t.Run("diagnose a healthy member", func(t *testing.T) {
		mcs := cli{t: t, kubeconfig: mcs.kubeconfig}
		checks, fail := mcs.diagnose(ctx, "cluster1")
		if fail || len(failed(checks)) > 0 {
			t.Errorf("diagnose cluster1 failed: %v", failed(checks))
		}
		if c := checks["export rules"]; c.Result != diagnose.Pass || !strings.HasPrefix(c.Detail, "no namespace is exported by more than one member") {
			t.Errorf("export rules with shop exported by cluster2 alone: %+v", c)
		}
		if len(checks) < 14 {
			t.Errorf("diagnose ran %d checks: %v", len(checks), checks)
		}
		if !strings.Contains(checks["broker identity"].Detail, "cluster-"+id1) {
			t.Errorf("broker identity: %+v", checks["broker identity"])
		}
		// cluster2 has no CoreDNS: that and nothing else fails, with a fix.
		checks, fail = mcs.diagnose(ctx, "cluster2")
		if got := failed(checks); !fail || len(got) != 1 || checks["CoreDNS forwards clusterset.local"].Result != diagnose.Fail ||
			checks["CoreDNS forwards clusterset.local"].Fix == "" {
			t.Errorf("diagnose cluster2: failed %v, want only the CoreDNS check", got)
		}
		if !strings.Contains(checks["cluster ID"].Detail, "ClusterProperty") {
			t.Errorf("cluster2's ID does not come from its ClusterProperty: %+v", checks["cluster ID"])
		}
		table, _, _ := mcs.run(ctx, "diagnose", "--context", "cluster2")
		if !strings.Contains(table, "FAIL") || !strings.Contains(table, "fix: ") {
			t.Errorf("diagnose table:\n%s", table)
		}
		t.Logf("kubectl mcs diagnose --context cluster2:\n%s", table)
	})

	t.Run("gather", func(t *testing.T) {
		mcs := cli{t: t, kubeconfig: mcs.kubeconfig}
		path := filepath.Join(t.TempDir(), "gather.tar.gz")
		mcs.must(ctx, "gather", "--context", "cluster1", "--output", path)
		files := readArchive(t, path)
		token, err := cs.Broker.Kube.CoreV1().Secrets(broker.DefaultNamespace).Get(ctx, broker.ServiceAccountName(id1)+"-token", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for file, data := range files {
			if bytes.Contains(data, token.Data[corev1.ServiceAccountTokenKey]) || strings.Contains(string(data), "kind: Secret") {
				t.Errorf("%s holds a Secret or the broker token", file)
			}
		}
		for file, want := range map[string]string{
			"member/serviceimports.yaml":                "name: " + name,
			"member/endpointslices-mcs.yaml":            "multicluster.kubernetes.io/source-cluster: " + id2,
			"member/serviceexports.yaml":                "items: []",
			"broker/leases.yaml":                        "name: cluster-" + id1,
			"broker/configmaps.yaml":                    "name: " + broker.DeclarationName(id1),
			"broker/clusters.yaml":                      "id: " + id2,
			"member/kube-system/coredns-configmap.yaml": "clusterset.local",
		} {
			if !strings.Contains(string(files[file]), want) {
				t.Errorf("%s lacks %q:\n%s", file, want, files[file])
			}
		}
		if strings.Contains(string(files["broker/configmaps.yaml"]), broker.DeclarationName(id2)) {
			t.Error("gather took another cluster's records")
		}
		if e, ok := files["errors.txt"]; ok {
			t.Logf("errors.txt:\n%s", e)
		}
	})

	t.Run("export rules", func(t *testing.T) {
		mcs := cli{t: t, kubeconfig: mcs.kubeconfig}
		// cluster1 exports shop/web too: two members export shop, and no
		// rule covers it.
		exportService(ctx, t, c1, ns, name, c1.PodCIDR.Addr().Next().Next().String())
		eventually(ctx, t, "cluster1's record of shop/web on the broker", func() bool {
			return mcs.status(ctx, "--broker-context", "broker")[id1].Exports == 1
		})
		checks, fail := mcs.diagnose(ctx, "cluster1")
		c := checks["export rules"]
		wantFix := "kubectl mcs broker export-rules set shop --members " + strings.Join(sortedIDs(id1, id2), ",")
		if fail || c.Result != diagnose.Warn || !strings.Contains(c.Detail, "shop (exported by ") || !strings.Contains(c.Fix, wantFix) {
			t.Errorf("export rules check with shop exported by both, no rule: failed %v, %+v; want a warning with the fix %q", fail, c, wantFix)
		}
		table, _, err := mcs.run(ctx, "diagnose", "--context", "cluster1", "--skip-reachability")
		if err != nil || !strings.Contains(table, "WARN") || !strings.Contains(table, wantFix) {
			t.Errorf("diagnose table (%v):\n%s", err, table)
		}
		t.Logf("kubectl mcs diagnose --context cluster1:\n%s", table)

		// The one-command form: the rule is named after the namespace it
		// covers.
		out := mcs.must(ctx, "broker", "export-rules", "set", ns, "--members", id1+","+id2, "--broker-context", "broker")
		if want := "export rule shop: only " + id1 + "," + id2 + " may export shop"; !strings.Contains(out, want) {
			t.Errorf("export-rules set said %q, want %q", out, want)
		}
		// The rule form, for prefixes; and one that keeps a member out,
		// which returns once the broker refuses that member.
		mcs.must(ctx, "broker", "export-rules", "set", "stock", "--namespaces", "stock,stock-*", "--members", id2, "--broker-context", "broker")
		slice := &discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{
				Name:   record.EndpointSliceName(id1, "stock-a", "web", discoveryv1.AddressTypeIPv4, 0),
				Labels: record.EndpointSliceLabels(id1, "stock-a", "web"),
			},
			AddressType: discoveryv1.AddressTypeIPv4,
		}
		_, err = m1.BrokerKube.DiscoveryV1().EndpointSlices(record.MemberNamespace(broker.DefaultNamespace, id1)).Create(ctx, slice, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if !apierrors.IsForbidden(err) && !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), broker.ExportRuleName("stock")) {
			t.Errorf("cluster1 exporting stock-a under rule stock: %v, want refused by the rule", err)
		}
		var rules broker.ExportRules
		if err := json.Unmarshal([]byte(mcs.must(ctx, "broker", "export-rules", "show", "-o", "json", "--broker-context", "broker")), &rules); err != nil {
			t.Fatal(err)
		}
		want := broker.ExportRules{
			{Name: "shop", Namespaces: []string{"shop"}, Members: []string{id1, id2}},
			{Name: "stock", Namespaces: []string{"stock", "stock-*"}, Members: []string{id2}},
		}
		if fmt.Sprint(rules) != fmt.Sprint(want) {
			t.Errorf("export-rules show: %+v, want %+v", rules, want)
		}
		for _, bad := range []struct {
			args []string
			want string
		}{
			{[]string{"shop-*", "--members", id1}, `"shop-*" is a prefix: name the rule and give the prefix with --namespaces`},
			{[]string{"Shop", "--members", id1}, `export rule "Shop": the name must be an RFC 1123 label`},
			{[]string{"shop", "--namespaces", "", "--members", id1}, "export rule shop: no namespaces"},
		} {
			_, _, err := mcs.run(ctx, append([]string{"broker", "export-rules", "set", "--broker-context", "broker"}, bad.args...)...)
			if err == nil || !strings.Contains(err.Error(), bad.want) {
				t.Errorf("export-rules set %v: %v, want %q", bad.args, err, bad.want)
			}
		}
		mcs.must(ctx, "broker", "export-rules", "delete", "stock", "--broker-context", "broker")

		checks, fail = mcs.diagnose(ctx, "cluster1")
		if c := checks["export rules"]; fail || c.Result != diagnose.Pass || !strings.Contains(c.Detail, "every namespace that several members export (1)") {
			t.Errorf("export rules check under rule shop: failed %v, %+v", fail, c)
		}
	})

	t.Run("overlapping pod CIDRs", func(t *testing.T) {
		mcs := cli{t: t, kubeconfig: mcs.kubeconfig}
		overlap := netip.PrefixFrom(c1.PodCIDR.Addr(), 24)
		_, err := broker.AddMember(ctx, cs.Broker.Kube, broker.DefaultNamespace, "intruder", broker.MemberOptions{PodCIDRs: []netip.Prefix{overlap}})
		if err == nil || !strings.Contains(err.Error(), overlap.String()+" overlaps "+c1.PodCIDR.String()+" of member "+id1) {
			t.Fatalf("joining with cluster1's pod CIDR: %v", err)
		}
		// A declaration written by hand, which AddMember would refuse.
		if _, err := cs.Broker.Kube.CoreV1().ConfigMaps(broker.DefaultNamespace).Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: broker.DeclarationName("intruder"), Labels: map[string]string{broker.LabelDeclaration: "", mcsv1beta1.LabelSourceCluster: "intruder"}},
			Data:       map[string]string{broker.DeclarationPodCIDRsKey: overlap.String()},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		checks, fail := mcs.diagnose(ctx, "cluster1")
		if c := checks["CIDRs"]; !fail || c.Result != diagnose.Fail || !strings.Contains(c.Detail, "intruder pods "+overlap.String()) || c.Fix == "" {
			t.Errorf("CIDRs check: %+v", c)
		}
		if c := mcs.status(ctx)["intruder"]; c.State != liveness.Unknown || c.RenewTime != nil || !c.Declared {
			t.Errorf("status of a declared member without Lease: %+v", c)
		}
		mcs.must(ctx, "leave", "--broker-context", "broker", "--cluster-id", "intruder")
		if _, ok := mcs.status(ctx)["intruder"]; ok {
			t.Error("status still lists a member that left")
		}
		if _, err := cs.Broker.Kube.CoreV1().ServiceAccounts(broker.DefaultNamespace).Get(ctx, broker.ServiceAccountName("intruder"), metav1.GetOptions{}); err == nil {
			t.Error("the identity of a member that left is still there")
		}
		if checks, _ := mcs.diagnose(ctx, "cluster1"); checks["CIDRs"].Result != diagnose.Pass {
			t.Errorf("CIDRs after the intruder left: %+v", checks["CIDRs"])
		}
	})

	t.Run("a broker identity without rights", func(t *testing.T) {
		mcs := cli{t: t, kubeconfig: mcs.kubeconfig}
		if err := cs.Broker.Kube.RbacV1().RoleBindings(broker.DefaultNamespace).Delete(ctx, broker.MemberRole+"-"+id1, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := cs.Broker.Kube.RbacV1().RoleBindings(record.MemberNamespace(broker.DefaultNamespace, id1)).Delete(ctx, broker.MemberWriterRole, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		var checks map[string]diagnose.Check
		eventually(ctx, t, "diagnose sees the lost rights", func() bool {
			checks, _ = mcs.diagnose(ctx, "cluster1")
			return checks["writes own records"].Result == diagnose.Fail
		})
		if c := checks["writes own records"]; !strings.Contains(c.Fix, broker.MemberWriterRole) {
			t.Errorf("writes own records: %+v", c)
		}
		if c := checks["broker reachable"]; c.Result != diagnose.Fail || !strings.Contains(c.Fix, "join again") {
			t.Errorf("broker reachable: %+v", c)
		}
		// Joining again restores the rights.
		mcs.must(ctx, "join", "--broker-context", "broker", "--context", "cluster1", "--pod-cidrs", c1.PodCIDR.String(), "--install=false", "--wait=false")
		eventually(ctx, t, "diagnose passes after joining again", func() bool {
			checks, fail := mcs.diagnose(ctx, "cluster1")
			return !fail && len(failed(checks)) == 0
		})
	})

	t.Run("admission policy not enforced", func(t *testing.T) {
		mcs := cli{t: t, kubeconfig: mcs.kubeconfig}
		if err := cs.Broker.Kube.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Delete(ctx, broker.SourceClusterPolicy, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		var checks map[string]diagnose.Check
		eventually(ctx, t, "diagnose sees another cluster's Lease accepted", func() bool {
			checks, _ = mcs.diagnose(ctx, "cluster1")
			return checks["others' records refused"].Result == diagnose.Fail
		})
		if c := checks["others' records refused"]; !strings.Contains(c.Fix, "broker install") {
			t.Errorf("others' records refused: %+v", c)
		}
		mcs.must(ctx, "broker", "install", "--broker-context", "broker", "--skip-crds")
		if checks, _ := mcs.diagnose(ctx, "cluster1"); checks["others' records refused"].Result != diagnose.Pass {
			t.Errorf("after broker install: %+v", checks["others' records refused"])
		}
	})

	t.Run("clock skew", func(t *testing.T) {
		mcs := cli{t: t, kubeconfig: mcs.kubeconfig}
		// A cluster whose clock is 30 s ahead of the broker's.
		skewed := &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: "cluster-skewed", Labels: map[string]string{mcsv1beta1.LabelSourceCluster: "skewed"}},
			Spec:       coordinationv1.LeaseSpec{RenewTime: &metav1.MicroTime{Time: time.Now().Add(30 * time.Second)}},
		}
		skewedNS, err := fixture.CreateMemberNamespace(ctx, cs.Broker.Kube, "skewed")
		if err != nil {
			t.Fatal(err)
		}
		leases := cs.Broker.Kube.CoordinationV1().Leases(skewedNS)
		if _, err := leases.Create(ctx, skewed, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		checks, fail := mcs.diagnose(ctx, "cluster1")
		if c := checks["clock skew"]; !fail || c.Result != diagnose.Fail || !strings.Contains(c.Detail, "skewed is 3") || c.Fix == "" {
			t.Errorf("clock skew: %+v", c)
		}
		if err := leases.Delete(ctx, skewed.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		if checks, _ := mcs.diagnose(ctx, "cluster1"); checks["clock skew"].Result != diagnose.Pass {
			t.Errorf("clock skew without the skewed Lease: %+v", checks["clock skew"])
		}
	})

	t.Run("a missing CRD", func(t *testing.T) {
		mcs := cli{t: t, kubeconfig: mcs.kubeconfig}
		crd := "clusterproperties.about.k8s.io"
		if err := c1.APIExtensions.ApiextensionsV1().CustomResourceDefinitions().Delete(ctx, crd, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		var checks map[string]diagnose.Check
		eventually(ctx, t, "diagnose sees the CRD gone", func() bool {
			checks, _ = mcs.diagnose(ctx, "cluster1")
			return checks["CRD "+crd].Result == diagnose.Fail
		})
		if c := checks["CRD "+crd]; c.Detail != "not installed" || !strings.Contains(c.Fix, "manifests/crds") {
			t.Errorf("CRD check: %+v", c)
		}
		if c := checks["CRD serviceimports.multicluster.x-k8s.io"]; c.Result != diagnose.Pass || !strings.Contains(c.Detail, "v1beta1") {
			t.Errorf("the ServiceImport CRD: %+v", c)
		}
		// Without the property's CRD the ID is still the kube-system UID.
		if c := checks["cluster ID"]; c.Result != diagnose.Pass || !strings.HasPrefix(c.Detail, id1) {
			t.Errorf("cluster ID without the CRD: %+v", c)
		}
	})

	t.Run("a dead cluster", func(t *testing.T) {
		mcs := cli{t: t, kubeconfig: mcs.kubeconfig}
		exporter2.Stop()
		// As the member's importer judges it (its TTL, 10 s), and the
		// nodes of cluster1 act on it.
		eventually(ctx, t, "cluster2 gone, cluster1 live", func() bool {
			clusters := mcs.status(ctx)
			return clusters[id2].State == liveness.Gone && clusters[id1].State == liveness.Live
		})
		checks, fail := mcs.diagnose(ctx, "cluster2", "--cluster-ttl", "3s")
		if c := checks["heartbeat"]; !fail || c.Result != diagnose.Fail || !strings.Contains(c.Detail, "not renewed") || c.Fix == "" {
			t.Errorf("heartbeat of the dead cluster: %+v", c)
		}
		table := mcs.must(ctx, "status")
		for _, line := range strings.Split(table, "\n") {
			if strings.HasPrefix(line, id2+" ") && !strings.Contains(line, liveness.Gone) {
				t.Errorf("table line of cluster2: %q", line)
			}
		}
	})

	t.Run("leave", func(t *testing.T) {
		mcs := cli{t: t, kubeconfig: mcs.kubeconfig}
		mcs.must(ctx, "leave", "--broker-context", "broker", "--context", "cluster2")
		if _, ok := mcs.status(ctx, "--context", "cluster1")[id2]; ok {
			t.Error("status still lists cluster2")
		}
		records, err := cs.Broker.MCS.MulticlusterV1beta1().ServiceImports(metav1.NamespaceAll).List(ctx, metav1.ListOptions{LabelSelector: record.ClusterSelector(id2).String()})
		if err != nil || len(records.Items) != 0 {
			t.Errorf("records left on the broker: %v, %v", records, err)
		}
		if _, err := cs.Broker.Kube.CoreV1().Namespaces().Get(ctx, record.MemberNamespace(broker.DefaultNamespace, id2), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("cluster2's namespace on the broker after it left: %v", err)
		}
		if _, _, err := membership.BrokerConfig(ctx, c2.Kube); !errors.Is(err, membership.ErrNoSecret) {
			t.Errorf("the broker Secret of cluster2 after it left: %v", err)
		}
		checks, fail := mcs.diagnose(ctx, "cluster2")
		if c := checks["broker reachable"]; !fail || c.Result != diagnose.Fail || !strings.Contains(c.Fix, "kubectl mcs join") {
			t.Errorf("diagnose of a cluster that left: %+v", c)
		}
	})
}

// member is the fixture's view of a joined cluster, with the broker
// credentials join stored in it, and its ClusterSetIP blocks claimed as
// mcsd claims them.
func member(ctx context.Context, t *testing.T, c *harness.Cluster, id string) *fixture.Member {
	t.Helper()
	cfg, ns, err := membership.BrokerConfig(ctx, c.Kube)
	if err != nil {
		t.Fatal(err)
	}
	if ns != broker.DefaultNamespace {
		t.Errorf("the broker kubeconfig of %s is in namespace %q", c.Name, ns)
	}
	m := &fixture.Member{Cluster: c, ID: id, BrokerKube: kubernetes.NewForConfigOrDie(cfg), BrokerMCS: mcsclient.NewForConfigOrDie(cfg), BrokerConfig: cfg,
		Blocks: map[corev1.IPFamily]netip.Prefix{}}
	claimer := vipalloc.Claimer{Kube: m.BrokerKube, Namespace: broker.DefaultNamespace, ClusterID: id}
	for family, set := range map[corev1.IPFamily]netip.Prefix{corev1.IPv4Protocol: vipalloc.DefaultClusterSetCIDRv4, corev1.IPv6Protocol: vipalloc.DefaultClusterSetCIDRv6} {
		bits := vipalloc.DefaultBlockBitsV4
		if family == corev1.IPv6Protocol {
			bits = vipalloc.DefaultBlockBitsV6
		}
		block, err := claimer.Claim(ctx, set, netip.Prefix{}, bits)
		if err != nil {
			t.Fatal(err)
		}
		m.Blocks[family] = block
	}
	return m
}

// exportService makes a Service with one ready endpoint, as a Deployment
// and the EndpointSlice controller would, and exports it.
func exportService(ctx context.Context, t *testing.T, c *harness.Cluster, ns, name, addr string) {
	t.Helper()
	svc := fixture.WebService(ns, name, name)
	svc.Spec.Selector = nil
	if _, err := c.Kube.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-1", Labels: map[string]string{
			discoveryv1.LabelServiceName: name, discoveryv1.LabelManagedBy: "test"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{addr}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](fixture.EchoPort), Protocol: ptr.To(corev1.ProtocolTCP)}},
	}
	if _, err := c.Kube.DiscoveryV1().EndpointSlices(ns).Create(ctx, slice, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	export := &mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	if _, err := c.MCS.MulticlusterV1beta1().ServiceExports(ns).Create(ctx, export, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// configureCoreDNS creates the mcsd-dns Service and a CoreDNS Corefile
// with the server block of manifests/mcsd/coredns-snippet.yaml, as the
// README has the operator do.
func configureCoreDNS(ctx context.Context, t *testing.T, c *harness.Cluster) {
	t.Helper()
	created := dnsService(ctx, t, c)
	data, err := os.ReadFile("../../manifests/mcsd/coredns-snippet.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var snippet corev1.ConfigMap
	if err := yaml.Unmarshal(data, &snippet); err != nil {
		t.Fatal(err)
	}
	block := strings.ReplaceAll(snippet.Data["clusterset.server"], "MCSD_DNS_CLUSTER_IP", created.Spec.ClusterIP)
	corefile := ".:53 {\n    errors\n    kubernetes cluster.local in-addr.arpa ip6.arpa\n    forward . /etc/resolv.conf\n}\n" + block
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceSystem, Name: "coredns"}, Data: map[string]string{"Corefile": corefile}}
	if _, err := c.Kube.CoreV1().ConfigMaps(metav1.NamespaceSystem).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// sortedIDs are ids in order.
func sortedIDs(ids ...string) []string {
	slices.Sort(ids)
	return ids
}

// readArchive returns the files of a tar.gz by name.
func readArchive(t *testing.T, path string) map[string][]byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	files := map[string][]byte{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files[h.Name] = data
	}
}
