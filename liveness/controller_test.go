package liveness

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	kubefake "k8s.io/client-go/kubernetes/fake"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	mcsfake "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned/fake"

	"github.com/mcsd-io/mcsd/internal/caches"
	"github.com/mcsd-io/mcsd/internal/controller"
	"github.com/mcsd-io/mcsd/internal/record"
)

// A cluster whose Lease stops changing is gone once the TTL has passed on
// this controller's clock: the ConfigMap says so, and the listener is told,
// once; its renewal brings it back.
func TestAClusterWhoseLeaseStopsIsPublishedGoneAndBack(t *testing.T) {
	const ns, brokerNS = "mcsd-system", "mcsd-broker"
	now := time.Date(2026, 11, 27, 9, 0, 0, 0, time.UTC)
	clk := clocktesting.NewFakeClock(now)
	lease := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: record.MemberNamespace(brokerNS, "west"), Name: record.LeaseName("west"), ResourceVersion: "1", Labels: record.LeaseLabels("west")},
		Spec:       coordinationv1.LeaseSpec{RenewTime: ptr.To(metav1.NewMicroTime(now))},
	}
	local := kubefake.NewClientset(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	brokerKube := kubefake.NewClientset(lease)
	brk := caches.NewBroker(brokerKube, mcsfake.NewSimpleClientset(), brokerNS, "east", 0)
	c, err := New(Config{
		Shared: controller.Shared{ClusterID: "east", BrokerNamespace: brokerNS, Local: local, Broker: brokerKube, Clock: clk},
		TTL:    6 * time.Second,
	}, brk)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var told []Transition
	c.OnTransition(func(tr Transition) {
		mu.Lock()
		defer mu.Unlock()
		told = append(told, tr)
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer brk.Shutdown()
	defer cancel()
	go func() { _ = c.Run(ctx) }()
	brk.Start(ctx.Done())

	published := func(what string, want string) {
		t.Helper()
		if err := wait.PollUntilContextTimeout(ctx, time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
			cm, err := local.CoreV1().ConfigMaps(ns).Get(ctx, ConfigMapName, metav1.GetOptions{})
			return err == nil && cm.Data["west"] == want, nil
		}); err != nil {
			t.Fatalf("%s: the ConfigMap never said west is %s", what, want)
		}
	}
	published("once its Lease is seen", Live)
	if !c.HasSynced() || !c.Live("west") || !c.Live("east") || c.Live("north") {
		t.Fatalf("synced %v, live west %v east %v north %v", c.HasSynced(), c.Live("west"), c.Live("east"), c.Live("north"))
	}

	// Time passes on the controller's clock, a second at a time: west is
	// gone once the TTL has passed since its Lease was seen.
	stepped := time.Duration(0)
	if err := wait.PollUntilContextTimeout(ctx, time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		cm, err := local.CoreV1().ConfigMaps(ns).Get(ctx, ConfigMapName, metav1.GetOptions{})
		if err == nil && cm.Data["west"] == Gone {
			return true, nil
		}
		clk.Step(time.Second)
		stepped += time.Second
		return false, nil
	}); err != nil {
		t.Fatal("the ConfigMap never said west is gone")
	}
	if stepped < 6*time.Second {
		t.Fatalf("west was published gone after %v, within the TTL", stepped)
	}
	if c.Live("west") || !c.Pinned("west") {
		t.Fatalf("gone west: live %v, pinned %v (its records count for the grace)", c.Live("west"), c.Pinned("west"))
	}

	lease.Spec.RenewTime = ptr.To(metav1.NewMicroTime(clk.Now()))
	lease.ResourceVersion = "2"
	if _, err := brokerKube.CoordinationV1().Leases(lease.Namespace).Update(ctx, lease, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	published("after it renewed", Live)
	// The ConfigMap is asked for before the listener is told.
	var kinds []TransitionKind
	_ = wait.PollUntilContextTimeout(ctx, time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		kinds = nil
		for _, tr := range told {
			if tr.Cluster == "west" {
				kinds = append(kinds, tr.Kind)
			}
		}
		return len(kinds) >= 3, nil
	})
	if len(kinds) != 3 || kinds[0] != ClusterLive || kinds[1] != ClusterGone || kinds[2] != ClusterLive {
		t.Fatalf("told %v of west, want live, gone, live", kinds)
	}
}

// The probe reads the Leases as the informer does: across the members'
// namespaces, each counting only in its own cluster's.
func TestTheProbeReadsEachLeaseInItsClustersNamespaceOnly(t *testing.T) {
	const brokerNS = "mcsd-broker"
	now := time.Date(2026, 11, 27, 9, 0, 0, 0, time.UTC)
	lease := func(namespace, cluster string) *coordinationv1.Lease {
		return &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: record.LeaseName(cluster), ResourceVersion: "1", Labels: record.LeaseLabels(cluster)},
			Spec:       coordinationv1.LeaseSpec{RenewTime: ptr.To(metav1.NewMicroTime(now))},
		}
	}
	brokerKube := kubefake.NewClientset(
		lease(record.MemberNamespace(brokerNS, "west"), "west"),
		// Written where its cluster may not write: by someone else.
		lease(brokerNS, "north"),
		lease(record.MemberNamespace(brokerNS, "east"), "south"),
	)
	c, err := New(Config{
		Shared: controller.Shared{ClusterID: "east", BrokerNamespace: brokerNS, Local: kubefake.NewClientset(), Broker: brokerKube, Clock: clocktesting.NewFakeClock(now)},
	}, caches.NewBroker(brokerKube, mcsfake.NewSimpleClientset(), brokerNS, "east", 0))
	if err != nil {
		t.Fatal(err)
	}
	c.probe(context.Background())
	c.book.mu.Lock()
	defer c.book.mu.Unlock()
	if _, ok := c.book.seen["west"]; !ok || len(c.book.seen) != 1 {
		t.Fatalf("the probe saw the Leases of %v, want west's only", c.book.seen)
	}
}

// A heartbeat renewal counts as contact with the broker only while the
// broker is up: one answered by an API server that is stopping must not
// end the outage the probe has just begun. Only the probe, which lists the
// Leases first, ends it.
func TestARenewalDoesNotEndAnOutageTheProbeBegan(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 27, 9, 0, 0, 0, time.UTC))
	brokerKube := kubefake.NewClientset()
	brk := caches.NewBroker(brokerKube, mcsfake.NewSimpleClientset(), "mcsd-broker", "east", 0)
	c, err := New(Config{
		Shared: controller.Shared{ClusterID: "east", BrokerNamespace: "mcsd-broker", Local: kubefake.NewClientset(), Broker: brokerKube, Clock: clk},
		TTL:    6 * time.Second,
	}, brk)
	if err != nil {
		t.Fatal(err)
	}
	if !c.renewalAnswered() {
		t.Fatal("a renewal while the broker is up was not taken as contact")
	}
	if last, down := c.BrokerDown(); down || !last.Equal(clk.Now()) {
		t.Fatalf("after a renewal: down %v, last contact %v; want up, %v", down, last, clk.Now())
	}
	clk.Step(time.Second)
	c.brokerAnswered(context.Background(), errors.New("connection refused"))
	clk.Step(time.Second)
	if c.renewalAnswered() {
		t.Fatal("a renewal ended the outage the probe began")
	}
	if _, down := c.BrokerDown(); !down {
		t.Fatal("the broker counts as up after a renewal during an outage")
	}
	if _, frozen := c.book.frozen(); !frozen {
		t.Fatal("liveness thawed by a renewal during an outage")
	}
}
