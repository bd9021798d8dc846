package broker_test

import (
	"context"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
	mcsclient "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned"

	"github.com/mcsd-io/mcsd/broker"
	"github.com/mcsd-io/mcsd/test/harness"
)

type member struct {
	kube kubernetes.Interface
	mcs  mcsclient.Interface
}

func record(name, cluster string) *mcsv1beta1.ServiceImport {
	si := &mcsv1beta1.ServiceImport{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: broker.DefaultNamespace, Labels: map[string]string{}},
		Spec:       mcsv1beta1.ServiceImportSpec{Type: mcsv1beta1.ClusterSetIP, Ports: []mcsv1beta1.ServicePort{{Port: 80, Protocol: corev1.ProtocolTCP}}},
	}
	if cluster != "" {
		si.Labels[mcsv1beta1.LabelSourceCluster] = cluster
	}
	return si
}

func TestAMemberCannotForgeAnotherMembersRecords(t *testing.T) {
	cs := harness.Start(t, harness.Options{Clusters: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	b := cs.Broker
	if err := broker.Install(ctx, b.Kube, broker.DefaultNamespace); err != nil {
		t.Fatal(err)
	}
	if err := broker.Install(ctx, b.Kube, broker.DefaultNamespace); err != nil {
		t.Fatalf("installing twice must be harmless: %v", err)
	}
	members := map[string]member{}
	for _, id := range []string{"cluster2", "cluster3"} {
		token, err := broker.AddMember(ctx, b.Kube, broker.DefaultNamespace, id)
		if err != nil {
			t.Fatal(err)
		}
		cfg := b.TokenConfig(token)
		members[id] = member{kube: kubernetes.NewForConfigOrDie(cfg), mcs: mcsclient.NewForConfigOrDie(cfg)}
	}
	two, three := members["cluster2"], members["cluster3"]
	records := func(m member) interface {
		Create(context.Context, *mcsv1beta1.ServiceImport, metav1.CreateOptions) (*mcsv1beta1.ServiceImport, error)
	} {
		return m.mcs.MulticlusterV1beta1().ServiceImports(broker.DefaultNamespace)
	}

	// The policy takes effect asynchronously after it is created: wait until
	// a forged write is refused before asserting anything else.
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := records(two).Create(ctx, record("probe", "cluster3"), metav1.CreateOptions{})
		if err == nil {
			_ = b.MCS.MulticlusterV1beta1().ServiceImports(broker.DefaultNamespace).Delete(ctx, "probe", metav1.DeleteOptions{})
			return false, nil
		}
		return apierrors.IsInvalid(err) || apierrors.IsForbidden(err), nil
	})
	if err != nil {
		t.Fatalf("the admission policy never took effect: %v", err)
	}

	t.Run("step 1: a member writes its own records", func(t *testing.T) {
		if _, err := records(three).Create(ctx, record("svc-cluster3", "cluster3"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := records(two).Create(ctx, record("svc-cluster2", "cluster2"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("step 2: a member reads every member's records", func(t *testing.T) {
		list, err := two.mcs.MulticlusterV1beta1().ServiceImports(broker.DefaultNamespace).List(ctx, metav1.ListOptions{})
		if err != nil || len(list.Items) != 2 {
			t.Fatalf("list = %d items, %v; want both records", len(list.Items), err)
		}
	})

	refused := func(t *testing.T, err error, wantInMessage string) {
		t.Helper()
		if err == nil {
			t.Fatal("the API server accepted a forged write")
		}
		if !strings.Contains(err.Error(), wantInMessage) {
			t.Fatalf("refusal %q does not say %q", err, wantInMessage)
		}
	}

	t.Run("step 3: creating a record labelled with another cluster is refused", func(t *testing.T) {
		_, err := records(two).Create(ctx, record("forged", "cluster3"), metav1.CreateOptions{})
		refused(t, err, "cluster cluster2 may only write objects labelled multicluster.kubernetes.io/source-cluster=cluster2")
	})

	t.Run("step 4: creating a record with no source cluster is refused", func(t *testing.T) {
		_, err := records(two).Create(ctx, record("anonymous", ""), metav1.CreateOptions{})
		refused(t, err, "with no source cluster")
	})

	t.Run("step 5: changing another cluster's record is refused", func(t *testing.T) {
		si, err := two.mcs.MulticlusterV1beta1().ServiceImports(broker.DefaultNamespace).Get(ctx, "svc-cluster3", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		si.Labels[mcsv1beta1.LabelSourceCluster] = "cluster2"
		_, err = two.mcs.MulticlusterV1beta1().ServiceImports(broker.DefaultNamespace).Update(ctx, si, metav1.UpdateOptions{})
		refused(t, err, "may not change or delete an object of cluster cluster3")
	})

	t.Run("step 6: deleting another cluster's record is refused", func(t *testing.T) {
		err := two.mcs.MulticlusterV1beta1().ServiceImports(broker.DefaultNamespace).Delete(ctx, "svc-cluster3", metav1.DeleteOptions{})
		refused(t, err, "may not change or delete an object of cluster cluster3")
	})

	t.Run("step 7: relabelling its own record to another cluster is refused", func(t *testing.T) {
		si, err := two.mcs.MulticlusterV1beta1().ServiceImports(broker.DefaultNamespace).Get(ctx, "svc-cluster2", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		si.Labels[mcsv1beta1.LabelSourceCluster] = "cluster3"
		_, err = two.mcs.MulticlusterV1beta1().ServiceImports(broker.DefaultNamespace).Update(ctx, si, metav1.UpdateOptions{})
		refused(t, err, "may only write objects labelled multicluster.kubernetes.io/source-cluster=cluster2")
	})

	t.Run("step 8: EndpointSlices, Leases and CIDR claims are bound the same way", func(t *testing.T) {
		src := map[string]string{mcsv1beta1.LabelSourceCluster: "cluster3"}
		_, err := two.kube.DiscoveryV1().EndpointSlices(broker.DefaultNamespace).Create(ctx, &discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{Name: "forged-slice", Labels: src}, AddressType: discoveryv1.AddressTypeIPv4,
		}, metav1.CreateOptions{})
		refused(t, err, "cluster cluster2 may only write")
		_, err = two.kube.CoordinationV1().Leases(broker.DefaultNamespace).Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: "cluster3", Labels: src},
		}, metav1.CreateOptions{})
		refused(t, err, "cluster cluster2 may only write")
		_, err = two.kube.CoreV1().ConfigMaps(broker.DefaultNamespace).Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: "cidr-243-3-0-0-16", Labels: src},
		}, metav1.CreateOptions{})
		refused(t, err, "cluster cluster2 may only write")
		own := map[string]string{mcsv1beta1.LabelSourceCluster: "cluster2"}
		if _, err := two.kube.CoordinationV1().Leases(broker.DefaultNamespace).Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: "cluster2", Labels: own},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatalf("a member's own Lease was refused: %v", err)
		}
	})

	t.Run("step 9: a member cannot write outside the broker namespace", func(t *testing.T) {
		_, err := two.mcs.MulticlusterV1beta1().ServiceImports("default").Create(ctx, &mcsv1beta1.ServiceImport{
			ObjectMeta: metav1.ObjectMeta{Name: "elsewhere", Labels: map[string]string{mcsv1beta1.LabelSourceCluster: "cluster2"}},
			Spec:       mcsv1beta1.ServiceImportSpec{Type: mcsv1beta1.ClusterSetIP, Ports: []mcsv1beta1.ServicePort{{Port: 80, Protocol: corev1.ProtocolTCP}}},
		}, metav1.CreateOptions{})
		if !apierrors.IsForbidden(err) {
			t.Fatalf("writing in namespace default: %v, want Forbidden", err)
		}
	})

	t.Run("step 10: an administrator is not bound by the policy", func(t *testing.T) {
		if err := b.MCS.MulticlusterV1beta1().ServiceImports(broker.DefaultNamespace).Delete(ctx, "svc-cluster3", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	})
}
