package caches

import (
	"context"
	"slices"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
	mcsfake "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned/fake"

	"github.com/mcsd-io/mcsd/internal/record"
	"github.com/mcsd-io/mcsd/test/lib/testenv"
)

func TestMain(m *testing.M) { testenv.RunWithFakeClientsets(m) }

// Each broker informer caches only what its kind's writer labels: every
// cluster's records, slices and Leases across the members' namespaces,
// each counting only in its writer's own (elsewhere it is kept anonymous),
// this cluster's slices in its namespace, the export rules in the broker
// namespace; each kept as its readers need it.
func TestBrokerInformersSelectAndTrim(t *testing.T) {
	const ns = "mcsd-broker"
	east, west := record.MemberNamespace(ns, "east"), record.MemberNamespace(ns, "west")
	om := func(namespace, name string, labels map[string]string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: labels}
	}
	kube := kubefake.NewClientset(
		&coordinationv1.Lease{ObjectMeta: om(east, record.LeaseName("east"), record.LeaseLabels("east"))},
		&coordinationv1.Lease{ObjectMeta: om(ns, "leader-election", nil)},
		&coordinationv1.Lease{ObjectMeta: om("elsewhere", record.LeaseName("west"), record.LeaseLabels("west"))},
		&discoveryv1.EndpointSlice{ObjectMeta: om(east, "east-slice", record.EndpointSliceLabels("east", "shop", "cart")), AddressType: discoveryv1.AddressTypeIPv4},
		&discoveryv1.EndpointSlice{ObjectMeta: om(west, "west-slice", record.EndpointSliceLabels("west", "shop", "cart")), AddressType: discoveryv1.AddressTypeIPv4},
		&discoveryv1.EndpointSlice{ObjectMeta: om(east, "west-in-east", record.EndpointSliceLabels("west", "shop", "cart")), AddressType: discoveryv1.AddressTypeIPv4},
		&corev1.ConfigMap{ObjectMeta: om(ns, "mcsd-export-rule-shop", map[string]string{record.LabelExportRule: ""})},
		&corev1.ConfigMap{ObjectMeta: om("elsewhere", "mcsd-export-rule-shop", map[string]string{record.LabelExportRule: ""})},
	)
	mcs := mcsfake.NewSimpleClientset(
		&mcsv1beta1.ServiceImport{ObjectMeta: om(west, "shop.cart.west", record.Labels("west", "shop", "cart"))},
		&mcsv1beta1.ServiceImport{ObjectMeta: om(ns, "shop.cart.east", record.Labels("east", "shop", "cart"))},
		&mcsv1beta1.ServiceImport{ObjectMeta: om(west, "stray", nil)},
	)
	b := NewBroker(kube, mcs, ns, "east", 0)
	leases, remote, own, records, rules := b.Leases(), b.Slices(), b.OwnSlices(), b.Records(), b.ExportRules()
	ctx, cancel := context.WithCancel(context.Background())
	defer b.Shutdown()
	defer cancel()
	b.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), leases.HasSynced, remote.HasSynced, own.HasSynced, records.HasSynced, rules.HasSynced) {
		t.Fatal("the broker informers did not sync")
	}
	// members are the keys of the objects that keep their writer's label.
	members := func(inf cache.SharedIndexInformer) []string {
		var out []string
		for _, o := range inf.GetStore().List() {
			if m, err := meta.Accessor(o); err == nil && m.GetLabels()[record.LabelSourceCluster] != "" {
				out = append(out, m.GetNamespace()+"/"+m.GetName())
			}
		}
		slices.Sort(out)
		return out
	}
	if got := members(leases); !slices.Equal(got, []string{east + "/" + record.LeaseName("east")}) {
		t.Errorf("Leases counts %v, want only east's heartbeat in %s", got, east)
	}
	if got := members(remote); !slices.Equal(got, []string{east + "/east-slice", west + "/west-slice"}) {
		t.Errorf("Slices counts %v, want every cluster's in its own namespace", got)
	}
	if got := own.GetStore().ListKeys(); !slices.Equal(got, []string{east + "/east-slice"}) {
		t.Errorf("OwnSlices holds %v, want only east's in %s", got, east)
	}
	if got := members(records); !slices.Equal(got, []string{west + "/shop.cart.west"}) {
		t.Errorf("Records counts %v, want west's record in its namespace only", got)
	}
	for _, o := range records.GetStore().List() {
		if _, ok := o.(*record.Cached); !ok {
			t.Errorf("Records keeps %T, want it decoded", o)
		}
	}
	if got := rules.GetStore().ListKeys(); !slices.Equal(got, []string{ns + "/mcsd-export-rule-shop"}) {
		t.Errorf("ExportRules holds %v, want the rule of the broker namespace", got)
	}
}

// A Local whose ServiceImports come from another shares that one's cache:
// one informer for the node agent and the importer of one process.
func TestLocalSharesTheImportsOfAnother(t *testing.T) {
	kube, mcs := kubefake.NewClientset(), mcsfake.NewSimpleClientset()
	node := NewLocal(kube, mcs, 0, LocalOptions{})
	ctrl := NewLocal(kube, mcs, time.Minute, LocalOptions{ImportsFrom: node})
	if ctrl.Imports() != node.Imports() || ctrl.MCSSlices() != node.MCSSlices() {
		t.Fatal("the controller's ServiceImports or MCS slices are not the node agent's")
	}
	if ctrl.Exports() == NewLocal(kube, mcs, 0, LocalOptions{}).Exports() {
		t.Fatal("two Locals share their ServiceExports")
	}
}

// A member that is also the broker holds every member's records, which
// are ServiceImports, in its member namespaces: its Imports leave them out.
func TestLocalImportsLeaveOutTheBrokersRecords(t *testing.T) {
	const ns = "mcsd-broker"
	mcs := mcsfake.NewSimpleClientset(
		&mcsv1beta1.ServiceImport{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "cart"}},
		&mcsv1beta1.ServiceImport{ObjectMeta: metav1.ObjectMeta{Namespace: record.MemberNamespace(ns, "west"), Name: "shop.cart.west", Labels: record.Labels("west", "shop", "cart")}},
	)
	l := NewLocal(kubefake.NewClientset(), mcs, 0, LocalOptions{})
	imports := l.Imports()
	ctx, cancel := context.WithCancel(context.Background())
	defer l.Shutdown()
	defer cancel()
	l.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), imports.HasSynced) {
		t.Fatal("the ServiceImport informer did not sync")
	}
	if got := imports.GetStore().ListKeys(); !slices.Equal(got, []string{"shop/cart"}) {
		t.Errorf("Imports holds %v, want only shop/cart", got)
	}
}
