package dnsconfig

import (
	"context"
	"net/netip"
	"os"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
)

const target = "10.96.0.53"

func corefileOf(t *testing.T, name string) string {
	t.Helper()
	data, err := os.ReadFile("../../internal/corefile/testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func configMap(name string, labels map[string]string, data map[string]string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceSystem, Name: name, Labels: labels}, Data: data}
}

func get(t *testing.T, kube *fake.Clientset, name string) *corev1.ConfigMap {
	t.Helper()
	cm, err := kube.CoreV1().ConfigMaps(metav1.NamespaceSystem).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return cm
}

// joinAndLeave joins, checks that joining again changes nothing, and
// returns the clientset after the first join and a function that leaves.
func joinAndLeave(t *testing.T, block string, objs ...runtime.Object) (*fake.Clientset, Plan, func() Plan) {
	t.Helper()
	ctx := context.Background()
	kube := fake.NewClientset(objs...)
	p, err := Join(ctx, kube, block, target)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Apply(ctx, kube, p); err != nil {
		t.Fatal(err)
	}
	again, err := Join(ctx, kube, block, target)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range again.Changes {
		if c.Manual == "" {
			t.Errorf("joining again would %s", c.What)
		}
	}
	return kube, p, func() Plan {
		t.Helper()
		p, err := Leave(ctx, kube, block)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := Apply(ctx, kube, p); err != nil {
			t.Fatal(err)
		}
		return p
	}
}

func TestJoinAndLeaveEachKindOfDNS(t *testing.T) {
	block, err := ServerBlock(target, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Run("kubeadm's CoreDNS: the block appended to the Corefile, and taken back", func(t *testing.T) {
		original := corefileOf(t, "kubeadm.corefile")
		kube, p, leave := joinAndLeave(t, block, configMap(CoreDNS, nil, map[string]string{CorefileKey: original}))
		if len(p.Changes) != 1 || len(p.Manual()) != 0 {
			t.Fatalf("changes %+v", p.Changes)
		}
		if got := get(t, kube, CoreDNS).Data[CorefileKey]; got != original+block {
			t.Fatalf("Corefile:\n%s", got)
		}
		leave()
		if got := get(t, kube, CoreDNS).Data[CorefileKey]; got != original {
			t.Fatalf("Corefile after leave:\n%s", got)
		}
	})
	t.Run("k3s's CoreDNS: the block in coredns-custom, which the Corefile imports", func(t *testing.T) {
		original := corefileOf(t, "k3s.corefile")
		kube, _, leave := joinAndLeave(t, block, configMap(CoreDNS, map[string]string{"objectset.rio.cattle.io/hash": "1"}, map[string]string{CorefileKey: original}))
		if got := get(t, kube, CoreDNSCustom).Data[CustomKey]; got != block {
			t.Fatalf("coredns-custom has %q", got)
		}
		if got := get(t, kube, CoreDNS).Data[CorefileKey]; got != original {
			t.Fatal("the k3s Corefile, which k3s rewrites, was edited")
		}
		leave()
		if _, has := get(t, kube, CoreDNSCustom).Data[CustomKey]; has {
			t.Fatal("leave left the key")
		}
	})
	t.Run("AKS's CoreDNS: reconciled, but its coredns-custom is the cluster owner's", func(t *testing.T) {
		kube, p, _ := joinAndLeave(t, block,
			configMap(CoreDNS, map[string]string{LabelAddonMode: "Reconcile"}, map[string]string{CorefileKey: corefileOf(t, "aks.corefile")}),
			configMap(CoreDNSCustom, map[string]string{LabelAddonMode: "EnsureExists"}, map[string]string{"other.server": "example.org {\n}\n"}))
		if len(p.Manual()) != 0 {
			t.Fatalf("manual changes %+v", p.Manual())
		}
		custom := get(t, kube, CoreDNSCustom)
		if custom.Data[CustomKey] != block || custom.Data["other.server"] == "" {
			t.Fatalf("coredns-custom: %v", custom.Data)
		}
	})
	t.Run("a Corefile the addon manager reconciles: the change to make by hand", func(t *testing.T) {
		original := corefileOf(t, "eks.corefile")
		kube, p, _ := joinAndLeave(t, block, configMap(CoreDNS, map[string]string{LabelAddonMode: "Reconcile"}, map[string]string{CorefileKey: original}))
		manual := p.Manual()
		if len(manual) != 1 || !strings.Contains(manual[0].Manual, "reconciled by the addon manager") || manual[0].After.Data[CorefileKey] != original+block {
			t.Fatalf("manual changes %+v", manual)
		}
		if get(t, kube, CoreDNS).Data[CorefileKey] != original {
			t.Fatal("a reconciled Corefile was edited")
		}
	})
	t.Run("NodeLocal DNSCache: forwards the zone as it does its cluster domain", func(t *testing.T) {
		nodeLocal := corefileOf(t, "nodelocaldns.corefile")
		kube, p, leave := joinAndLeave(t, block,
			configMap(CoreDNS, nil, map[string]string{CorefileKey: corefileOf(t, "eks.corefile")}),
			configMap(NodeLocalDNS, map[string]string{LabelAddonMode: "EnsureExists"}, map[string]string{CorefileKey: nodeLocal}))
		if len(p.Changes) != 2 || len(p.Found) != 2 {
			t.Fatalf("found %v, changes %+v", p.Found, p.Changes)
		}
		got := get(t, kube, NodeLocalDNS).Data[CorefileKey]
		if !strings.HasPrefix(got, nodeLocal+"clusterset.local:53 {\n") || !strings.Contains(got[len(nodeLocal):], "forward . __PILLAR__CLUSTER__DNS__") {
			t.Fatalf("NodeLocal DNSCache's Corefile:\n%s", got)
		}
		leave()
		if get(t, kube, NodeLocalDNS).Data[CorefileKey] != nodeLocal {
			t.Fatal("leave did not give NodeLocal DNSCache's Corefile back")
		}
	})
	t.Run("kube-dns: the stub domains to set by hand, keeping the others", func(t *testing.T) {
		_, p, _ := joinAndLeave(t, block,
			configMap(KubeDNS, map[string]string{LabelAddonMode: "EnsureExists"}, map[string]string{StubDomainsKey: `{"acme.local":["1.2.3.4"]}`}),
			&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceSystem, Name: KubeDNS}})
		manual := p.Manual()
		want := `{"243.in-addr.arpa":["10.96.0.53"],"4.6.3.7.3.6.d.6.a.7.d.f.ip6.arpa":["10.96.0.53"],"acme.local":["1.2.3.4"],"clusterset.local":["10.96.0.53"]}`
		if len(manual) != 1 || manual[0].After.Data[StubDomainsKey] != want {
			t.Fatalf("manual changes %+v", manual)
		}
	})
	t.Run("no DNS found: said, by hand", func(t *testing.T) {
		_, p, _ := joinAndLeave(t, block)
		if m := p.Manual(); len(m) != 1 || !strings.Contains(m[0].Manual, "no cluster DNS found") {
			t.Fatalf("plan %+v", p)
		}
	})
}

func TestServerBlockNamesTheReverseZonesOfTheRanges(t *testing.T) {
	block, err := ServerBlock(target, []netip.Prefix{netip.MustParsePrefix("244.10.0.0/16"), netip.MustParsePrefix("fd00:244::/48")})
	if err != nil {
		t.Fatal(err)
	}
	if first, _, _ := strings.Cut(block, "\n"); first != "clusterset.local 10.244.in-addr.arpa 0.0.0.0.4.4.2.0.0.0.d.f.ip6.arpa {" {
		t.Fatalf("first line %q", first)
	}
	if !strings.Contains(block, "forward . "+target) {
		t.Fatalf("block:\n%s", block)
	}
}
