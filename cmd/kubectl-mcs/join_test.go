package main

import (
	"context"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/mcsd-io/mcsd/broker"
	"github.com/mcsd-io/mcsd/kubectlmcs/dnsconfig"
	"github.com/mcsd-io/mcsd/kubectlmcs/install"
	"github.com/mcsd-io/mcsd/kubectlmcs/membership"
	"github.com/mcsd-io/mcsd/test/lib/harness"
)

// objectVersions are the resourceVersions of every object join or leave may
// touch, by kind, namespace and name.
func objectVersions(ctx context.Context, t *testing.T, kube kubernetes.Interface, namespaces ...string) map[string]string {
	t.Helper()
	out := map[string]string{}
	nss, err := kube.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	addAll(t, out, "Namespace", nss.Items, err)
	for _, ns := range namespaces {
		o := metav1.ListOptions{}
		cms, err := kube.CoreV1().ConfigMaps(ns).List(ctx, o)
		addAll(t, out, "ConfigMap", cms.Items, err)
		secrets, err := kube.CoreV1().Secrets(ns).List(ctx, o)
		addAll(t, out, "Secret", secrets.Items, err)
		sas, err := kube.CoreV1().ServiceAccounts(ns).List(ctx, o)
		addAll(t, out, "ServiceAccount", sas.Items, err)
		rbs, err := kube.RbacV1().RoleBindings(ns).List(ctx, o)
		addAll(t, out, "RoleBinding", rbs.Items, err)
		quotas, err := kube.CoreV1().ResourceQuotas(ns).List(ctx, o)
		addAll(t, out, "ResourceQuota", quotas.Items, err)
	}
	return out
}

// addAll adds the resourceVersions of a list's items to versions.
func addAll[T any, PT interface {
	*T
	metav1.Object
}](t *testing.T, versions map[string]string, kind string, items []T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	for i := range items {
		m := PT(&items[i])
		versions[kind+" "+m.GetNamespace()+"/"+m.GetName()] = m.GetResourceVersion()
	}
}

// changed lists the objects of after that are new or other than in before.
func changed(before, after map[string]string) []string {
	var out []string
	for k, v := range after {
		if before[k] != v {
			out = append(out, k)
		}
	}
	for k := range before {
		if _, ok := after[k]; !ok {
			out = append(out, k+" (deleted)")
		}
	}
	return out
}

// join configures the member's DNS, changes nothing the second time, prints
// what it would apply without applying it, and leave takes back exactly
// what it added.
func TestJoinConfiguresTheMembersDNSOnceAndLeaveTakesItBack(t *testing.T) {
	if testing.Short() {
		t.Skip("runs API servers")
	}
	cs := harness.Start(t, harness.Options{Clusters: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	mcs := cli{t: t, kubeconfig: mergedKubeconfig(t, cs)}
	c := cs.Members[0]
	mcs.must(ctx, "broker", "install", "--broker-context", "broker")

	// The member runs mcsd's DNS Service, kubeadm's CoreDNS and NodeLocal
	// DNSCache.
	svc := dnsService(ctx, t, c)
	kubeadm, err := os.ReadFile("../../internal/corefile/testdata/kubeadm.corefile")
	if err != nil {
		t.Fatal(err)
	}
	nodeLocal, err := os.ReadFile("../../internal/corefile/testdata/nodelocaldns.corefile")
	if err != nil {
		t.Fatal(err)
	}
	cms := c.Kube.CoreV1().ConfigMaps(metav1.NamespaceSystem)
	for name, corefile := range map[string]string{dnsconfig.CoreDNS: string(kubeadm), dnsconfig.NodeLocalDNS: string(nodeLocal)} {
		if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{dnsconfig.CorefileKey: corefile}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	corefileOf := func(name string) string {
		t.Helper()
		cm, err := cms.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return cm.Data[dnsconfig.CorefileKey]
	}
	// No kubelet runs the pods here: join does not wait for them.
	join := []string{"join", "--broker-context", "broker", "--context", c.Name, "--pod-cidrs", c.PodCIDR.String(), "--image", "registry.example/mcsd:test", "--wait=false"}
	brokerNamespaces := func() []string {
		nss := []string{broker.DefaultNamespace}
		list, _ := cs.Broker.Kube.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
		for _, ns := range list.Items {
			if strings.HasPrefix(ns.Name, broker.DefaultNamespace+"-") {
				nss = append(nss, ns.Name)
			}
		}
		return nss
	}
	snapshot := func() (map[string]string, map[string]string) {
		member := objectVersions(ctx, t, c.Kube, metav1.NamespaceSystem, install.DefaultNamespace)
		maps.Copy(member, installedVersions(ctx, t, c))
		return member, objectVersions(ctx, t, cs.Broker.Kube, brokerNamespaces()...)
	}
	dnsIP := func() string {
		t.Helper()
		cur, err := c.Kube.CoreV1().Services(svc.Namespace).Get(ctx, svc.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return cur.Spec.ClusterIP
	}

	t.Run("an image that cannot exist is refused before anything is written", func(t *testing.T) {
		memberBefore, brokerBefore := snapshot()
		for _, image := range []string{"", install.DevelopmentImage} {
			args := slices.DeleteFunc(slices.Clone(join), func(a string) bool { return a == "--image" || a == "registry.example/mcsd:test" })
			if image != "" {
				args = append(args, "--image", image)
			}
			_, _, err := mcs.run(ctx, args...)
			if err == nil || !strings.Contains(err.Error(), "--image") {
				t.Fatalf("join with image %q on a development build: %v, want a refusal naming --image", image, err)
			}
		}
		memberAfter, brokerAfter := snapshot()
		if d := append(changed(memberBefore, memberAfter), changed(brokerBefore, brokerAfter)...); len(d) > 0 {
			t.Fatalf("a refused join changed %q", d)
		}
	})

	t.Run("--dry-run=client -o yaml prints mcsd, the Secret and the DNS change, and changes nothing", func(t *testing.T) {
		memberBefore, brokerBefore := snapshot()
		out := mcs.must(ctx, append(join, "--dry-run=client", "-o", "yaml")...)
		docs := strings.Split(out, "\n---\n")
		shipped, err := install.Shipped(install.DefaultNamespace)
		if err != nil {
			t.Fatal(err)
		}
		// The CRDs the member lacks, mcsd, the Secret, two ConfigMaps.
		if len(docs) < len(shipped)+3 {
			t.Fatalf("printed %d objects, want mcsd's %d, the Secret and two ConfigMaps:\n%s", len(docs), len(shipped), out)
		}
		docs = docs[len(docs)-3:]
		if !strings.Contains(out, "kind: DaemonSet") || !strings.Contains(out, "--cluster-id=") || !strings.Contains(out, "--ip-families=") {
			t.Fatalf("no node agent rendered for the member:\n%s", out)
		}
		var secret corev1.Secret
		if err := yaml.Unmarshal([]byte(docs[0]), &secret); err != nil || secret.Kind != "Secret" || secret.Name != membership.SecretName ||
			!strings.Contains(string(secret.Data[membership.SecretKey]), membership.TokenPlaceholder) {
			t.Fatalf("the Secret, %v:\n%s", err, docs[0])
		}
		var corefile corev1.ConfigMap
		if err := yaml.Unmarshal([]byte(docs[1]), &corefile); err != nil || corefile.Name != dnsconfig.CoreDNS ||
			corefile.Data[dnsconfig.CorefileKey] != string(kubeadm)+mustBlock(t, svc.Spec.ClusterIP) {
			t.Fatalf("the Corefile, %v:\n%s", err, docs[1])
		}
		memberAfter, brokerAfter := snapshot()
		if d := append(changed(memberBefore, memberAfter), changed(brokerBefore, brokerAfter)...); len(d) > 0 {
			t.Fatalf("a dry run changed %q", d)
		}
	})

	t.Run("join installs mcsd, sets the block in CoreDNS and NodeLocal DNSCache; joining again changes no object", func(t *testing.T) {
		mcs.must(ctx, join...)
		if n := len(installedVersions(ctx, t, c)); n == 0 {
			t.Fatal("join installed no mcsd object")
		}
		if got := corefileOf(dnsconfig.CoreDNS); got != string(kubeadm)+mustBlock(t, svc.Spec.ClusterIP) {
			t.Fatalf("CoreDNS's Corefile:\n%s", got)
		}
		if got := corefileOf(dnsconfig.NodeLocalDNS); !strings.HasPrefix(got, string(nodeLocal)+"clusterset.local:53 {\n") {
			t.Fatalf("NodeLocal DNSCache's Corefile:\n%s", got)
		}
		memberBefore, brokerBefore := snapshot()
		_, errOut, err := mcs.run(ctx, join...)
		if err != nil {
			t.Fatalf("join again: %v\n%s", err, errOut)
		}
		memberAfter, brokerAfter := snapshot()
		d := append(changed(memberBefore, memberAfter), changed(brokerBefore, brokerAfter)...)
		t.Logf("figure: join twice: the second join changed %d of %d objects (member and broker)", len(d), len(memberAfter)+len(brokerAfter))
		if len(d) > 0 {
			t.Fatalf("joining again changed %q\n%s", d, errOut)
		}
		if !strings.Contains(errOut, "DNS: nothing to change") || !strings.Contains(errOut, "mcsd: nothing to change") {
			t.Errorf("join again said:\n%s", errOut)
		}
	})

	t.Run("join waits for mcsd's pods, and on timeout names the stage and what it saw", func(t *testing.T) {
		// No kubelet runs them here: the wait ends at --timeout.
		args := slices.DeleteFunc(slices.Clone(join), func(a string) bool { return a == "--wait=false" })
		_, errOut, err := mcs.run(ctx, append(args, "--timeout", "30s")...)
		const stage = "waiting until node agent rolled out: "
		if err == nil || !strings.Contains(err.Error(), stage) || strings.HasSuffix(err.Error(), stage) {
			t.Fatalf("join with --wait on a cluster without kubelets: %v, want it to give up at the node agents' rollout saying what it saw\n%s", err, errOut)
		}
		t.Log(err)
		for _, want := range []string{"join: mcsd installed in " + install.DefaultNamespace, "join: member", "registered on the broker", "join: CoreDNS configured"} {
			if !strings.Contains(errOut, want) {
				t.Errorf("join did not say %q:\n%s", want, errOut)
			}
		}
	})

	t.Run("leave takes back exactly what join added", func(t *testing.T) {
		mcs.must(ctx, "leave", "--broker-context", "broker", "--context", c.Name)
		if left := installedVersions(ctx, t, c); len(left) > 0 {
			t.Fatalf("leave left mcsd objects: %v", slices.Sorted(maps.Keys(left)))
		}
		// The CRDs stay: their deletion would delete the cluster's exports
		// and imports.
		if _, err := c.MCS.MulticlusterV1alpha1().ServiceExports(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{}); err != nil {
			t.Fatalf("the ServiceExport CRD after leave: %v", err)
		}
		if got := corefileOf(dnsconfig.CoreDNS); got != string(kubeadm) {
			t.Fatalf("CoreDNS's Corefile after leave:\n%s", got)
		}
		if got := corefileOf(dnsconfig.NodeLocalDNS); got != string(nodeLocal) {
			t.Fatalf("NodeLocal DNSCache's Corefile after leave:\n%s", got)
		}
	})

	t.Run("a Corefile the platform reconciles: join prints the change and fails, unless --dns=skip", func(t *testing.T) {
		cm, err := cms.Get(ctx, dnsconfig.CoreDNS, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cm.Labels = map[string]string{dnsconfig.LabelAddonMode: "Reconcile"}
		if _, err := cms.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		out, _, err := mcs.run(ctx, join...)
		if err == nil || !strings.Contains(err.Error(), "by hand") {
			t.Fatalf("join with a reconciled Corefile: %v\n%s", err, out)
		}
		for _, want := range []string{"# By hand: ConfigMap kube-system/coredns is reconciled by the addon manager", "kind: ConfigMap", "forward . " + dnsIP()} {
			if !strings.Contains(out, want) {
				t.Errorf("join printed no %q:\n%s", want, out)
			}
		}
		if got := corefileOf(dnsconfig.CoreDNS); got != string(kubeadm) {
			t.Fatalf("a reconciled Corefile was edited:\n%s", got)
		}
		mcs.must(ctx, append(join, "--dns=skip")...)
	})

	t.Run("no cluster DNS: join warns, says what to forward, and succeeds", func(t *testing.T) {
		for _, name := range []string{dnsconfig.CoreDNS, dnsconfig.NodeLocalDNS} {
			if err := cms.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		out, errOut, err := mcs.run(ctx, join...)
		if err != nil {
			t.Fatalf("join without a cluster DNS: %v\n%s%s", err, out, errOut)
		}
		if !strings.Contains(errOut, "warning: no cluster DNS found") || !strings.Contains(errOut, "forward . "+dnsIP()) {
			t.Fatalf("join warned:\n%s", errOut)
		}
	})
}

// installedVersions are the resourceVersions of the objects of
// manifests/mcsd that join applied in c.
func installedVersions(ctx context.Context, t *testing.T, c *harness.Cluster) map[string]string {
	t.Helper()
	shipped, err := install.Shipped(install.DefaultNamespace)
	if err != nil {
		t.Fatal(err)
	}
	client, err := install.NewClient(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, obj := range shipped {
		cur, err := client.Get(ctx, obj)
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if install.Applied(cur) {
			out[obj.GetKind()+" "+obj.GetNamespace()+"/"+obj.GetName()] = cur.GetResourceVersion()
		}
	}
	return out
}

// dnsService creates mcsd's DNS Service of manifests/mcsd in c.
func dnsService(ctx context.Context, t *testing.T, c *harness.Cluster) *corev1.Service {
	t.Helper()
	data, err := os.ReadFile("../../manifests/mcsd/dns-service.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var svc corev1.Service
	if err := yaml.Unmarshal(data, &svc); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: svc.Namespace}}, metav1.CreateOptions{}); err != nil && !strings.Contains(err.Error(), "already exists") {
		t.Fatal(err)
	}
	created, err := c.Kube.CoreV1().Services(svc.Namespace).Create(ctx, &svc, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return created
}

func mustBlock(t *testing.T, target string) string {
	t.Helper()
	block, err := dnsconfig.ServerBlock(target, nil)
	if err != nil {
		t.Fatal(err)
	}
	return block
}
