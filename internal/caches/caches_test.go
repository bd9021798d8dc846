package caches

import (
	"context"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
	mcsfake "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned/fake"

	"github.com/mcsd-io/mcsd/internal/record"
	"github.com/mcsd-io/mcsd/test/testenv"
)

func TestMain(m *testing.M) { testenv.RunWithFakeClientsets(m) }

// Each broker informer caches only what its kind's writer labels, in the
// broker namespace, kept as its readers need it.
func TestBrokerInformersSelectAndTrim(t *testing.T) {
	const ns = "mcsd-broker"
	meta := func(namespace, name string, labels map[string]string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: labels}
	}
	kube := kubefake.NewClientset(
		&coordinationv1.Lease{ObjectMeta: meta(ns, record.LeaseName("east"), record.LeaseLabels("east"))},
		&coordinationv1.Lease{ObjectMeta: meta(ns, "leader-election", nil)},
		&coordinationv1.Lease{ObjectMeta: meta("elsewhere", record.LeaseName("west"), record.LeaseLabels("west"))},
		&discoveryv1.EndpointSlice{ObjectMeta: meta(ns, "east-slice", record.EndpointSliceLabels("east", "shop", "cart")), AddressType: discoveryv1.AddressTypeIPv4},
		&discoveryv1.EndpointSlice{ObjectMeta: meta(ns, "west-slice", record.EndpointSliceLabels("west", "shop", "cart")), AddressType: discoveryv1.AddressTypeIPv4},
	)
	mcs := mcsfake.NewSimpleClientset(
		&mcsv1beta1.ServiceImport{ObjectMeta: meta(ns, "shop.cart.west", record.Labels("west", "shop", "cart"))},
		&mcsv1beta1.ServiceImport{ObjectMeta: meta(ns, "stray", nil)},
	)
	b := NewBroker(kube, mcs, ns, "east", 0)
	leases, slices, own, records := b.Leases(), b.Slices(), b.OwnSlices(), b.Records()
	ctx, cancel := context.WithCancel(context.Background())
	defer b.Shutdown()
	defer cancel()
	b.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), leases.HasSynced, slices.HasSynced, own.HasSynced, records.HasSynced) {
		t.Fatal("the broker informers did not sync")
	}
	keys := func(inf cache.SharedIndexInformer) []string { return inf.GetStore().ListKeys() }
	if got := keys(leases); len(got) != 1 || got[0] != ns+"/"+record.LeaseName("east") {
		t.Errorf("Leases holds %v, want only east's heartbeat in %s", got, ns)
	}
	if got := keys(slices); len(got) != 2 {
		t.Errorf("Slices holds %v, want every cluster's", got)
	}
	if got := keys(own); len(got) != 1 || got[0] != ns+"/east-slice" {
		t.Errorf("OwnSlices holds %v, want only east's", got)
	}
	if got := records.GetStore().List(); len(got) != 1 {
		t.Errorf("Records holds %v, want the labelled record only", got)
	} else if _, ok := got[0].(*record.Cached); !ok {
		t.Errorf("Records keeps %T, want it decoded", got[0])
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
