package exporter

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kubefake "k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/mcsd-io/mcsd/internal/record"
)

// heartbeat is the test cluster's heartbeat on a fake broker and clock.
func heartbeat(duration time.Duration) (*Heartbeat, *kubefake.Clientset, *clocktesting.FakeClock) {
	broker := kubefake.NewClientset()
	clk := clocktesting.NewFakeClock(exportCreated.Time)
	return &Heartbeat{
		Broker: broker, Namespace: testBrokerNS, Name: record.LeaseName(testCluster), ClusterID: testCluster,
		Duration: duration, Interval: time.Hour, Clock: clk,
	}, broker, clk
}

func lease(t *testing.T, broker *kubefake.Clientset) *coordinationv1.Lease {
	t.Helper()
	l, err := broker.CoordinationV1().Leases(testBrokerNS).Get(context.Background(), record.LeaseName(testCluster), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// renew renews the Lease at the clock's time, which must work, and returns
// the verbs of what it asked the broker and the Lease then.
func renew(t *testing.T, h *Heartbeat, broker *kubefake.Clientset, clk *clocktesting.FakeClock) (string, *coordinationv1.Lease) {
	t.Helper()
	broker.ClearActions()
	if err := h.renew(context.Background(), clk.Now()); err != nil {
		t.Fatal(err)
	}
	var verbs []string
	for _, a := range broker.Actions() {
		verbs = append(verbs, a.GetVerb())
	}
	return strings.Join(verbs, ","), lease(t, broker)
}

func TestHeartbeatRenewsTheLeaseAtTheClocksTime(t *testing.T) {
	h, broker, clk := heartbeat(40 * time.Second)
	start := clk.Now()

	verbs, l := renew(t, h, broker, clk)
	t.Run("the first renewal creates the Lease, held by this cluster since now", func(t *testing.T) {
		if verbs != "get,create" {
			t.Fatalf("actions %s, want get and create", verbs)
		}
		if ptr.Deref(l.Spec.HolderIdentity, "") != testCluster || ptr.Deref(l.Spec.LeaseDurationSeconds, 0) != 40 {
			t.Fatalf("lease held by %v for %v s, want %s for 40 s", l.Spec.HolderIdentity, l.Spec.LeaseDurationSeconds, testCluster)
		}
		if l.Labels[record.LabelSourceCluster] != testCluster {
			t.Fatalf("lease labels %v, want the source cluster", l.Labels)
		}
		if !l.Spec.AcquireTime.Time.Equal(start) || !l.Spec.RenewTime.Time.Equal(start) {
			t.Fatalf("acquired %v, renewed %v, want both at %v", l.Spec.AcquireTime, l.Spec.RenewTime, start)
		}
	})

	clk.Step(10 * time.Second)
	verbs, l = renew(t, h, broker, clk)
	t.Run("a later renewal updates the renew time and keeps the acquire time", func(t *testing.T) {
		if verbs != "get,update" {
			t.Fatalf("actions %s, want get and update", verbs)
		}
		if !l.Spec.RenewTime.Time.Equal(start.Add(10*time.Second)) || !l.Spec.AcquireTime.Time.Equal(start) {
			t.Fatalf("acquired %v, renewed %v, want acquired %v and renewed 10 s later", l.Spec.AcquireTime, l.Spec.RenewTime, start)
		}
	})
}

func TestHeartbeatLease(t *testing.T) {
	t.Run("a duration under a second is a lease of one second", func(t *testing.T) {
		h, broker, clk := heartbeat(300 * time.Millisecond)
		_, l := renew(t, h, broker, clk)
		if got := ptr.Deref(l.Spec.LeaseDurationSeconds, 0); got != 1 {
			t.Fatalf("lease of %d s, want 1", got)
		}
	})

	t.Run("a Lease another identity holds is taken back", func(t *testing.T) {
		h, broker, clk := heartbeat(40 * time.Second)
		old := &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Namespace: testBrokerNS, Name: record.LeaseName(testCluster)},
			Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To("someone"), LeaseDurationSeconds: ptr.To[int32](5)},
		}
		if err := broker.Tracker().Add(old); err != nil {
			t.Fatal(err)
		}
		_, l := renew(t, h, broker, clk)
		if ptr.Deref(l.Spec.HolderIdentity, "") != testCluster || ptr.Deref(l.Spec.LeaseDurationSeconds, 0) != 40 || !l.Spec.RenewTime.Time.Equal(clk.Now()) {
			t.Fatalf("lease %+v, want held by %s for 40 s, renewed now", l.Spec, testCluster)
		}
	})

	for _, tc := range []struct {
		name  string
		verb  string
		exist bool
		want  string
	}{
		{"a broker that cannot be read is reported", "get", false, "reading broker Lease mcsd-broker/cluster-east"},
		{"a Lease that cannot be created is reported", "create", false, "creating broker Lease mcsd-broker/cluster-east"},
		{"a Lease that cannot be renewed is reported", "update", true, "renewing broker Lease mcsd-broker/cluster-east"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, broker, clk := heartbeat(40 * time.Second)
			if tc.exist {
				renew(t, h, broker, clk)
			}
			broker.PrependReactor(tc.verb, "leases", func(clienttesting.Action) (bool, runtime.Object, error) {
				return true, nil, errors.New("the broker is down")
			})
			err := h.renew(context.Background(), clk.Now())
			if err == nil {
				t.Fatalf("renew succeeded although %s failed", tc.verb)
			}
			wantMessage(t, err.Error(), tc.want, "the broker is down")
		})
	}
}

func TestHeartbeatRunRenewsAtOnceAndReportsIt(t *testing.T) {
	h, broker, clk := heartbeat(40 * time.Second)
	renewed := make(chan error, 1)
	h.OnRenew = func(err error) {
		select {
		case renewed <- err:
		default:
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		h.Run(ctx)
	}()
	err := <-renewed
	cancel()
	<-done
	if err != nil {
		t.Fatalf("OnRenew was told %v, want success", err)
	}
	if l := lease(t, broker); !l.Spec.RenewTime.Time.Equal(clk.Now()) {
		t.Fatalf("renewed at %v, want the clock's %v", l.Spec.RenewTime, clk.Now())
	}
}

func TestHeartbeatWritesTheVersionOfMCSDOnTheLease(t *testing.T) {
	h, broker, clk := heartbeat(10 * time.Second)
	h.Version = "v1.2.3"
	if _, l := renew(t, h, broker, clk); l.Annotations[record.AnnotationLeaseVersion] != "v1.2.3" {
		t.Fatalf("created Lease annotations %v", l.Annotations)
	}
	h.Version = "v1.2.4" // an upgraded mcsd renews the Lease
	clk.Step(time.Second)
	if _, l := renew(t, h, broker, clk); l.Annotations[record.AnnotationLeaseVersion] != "v1.2.4" {
		t.Fatalf("renewed Lease annotations %v", l.Annotations)
	}
}

func TestStandInHeartbeatRenewsOnlyAStaleLease(t *testing.T) {
	leader, broker, clk := heartbeat(10 * time.Second)
	renew(t, leader, broker, clk)
	standby := *leader
	standby.StaleAfter = 5 * time.Second
	var stoodIn []time.Duration
	standby.OnStoodIn = func(age time.Duration) { stoodIn = append(stoodIn, age) }

	clk.Step(4 * time.Second)
	verbs, l := renew(t, &standby, broker, clk)
	t.Run("a Lease the leader renewed recently is left alone", func(t *testing.T) {
		if verbs != "get" || !l.Spec.RenewTime.Time.Equal(clk.Now().Add(-4*time.Second)) || len(stoodIn) != 0 {
			t.Fatalf("actions %s, renewed at %v, stood in %v: want a read only", verbs, l.Spec.RenewTime, stoodIn)
		}
	})

	clk.Step(2 * time.Second)
	verbs, l = renew(t, &standby, broker, clk)
	t.Run("a Lease the leader stopped renewing is renewed, and told", func(t *testing.T) {
		if verbs != "get,update" || !l.Spec.RenewTime.Time.Equal(clk.Now()) {
			t.Fatalf("actions %s, renewed at %v: want renewed now", verbs, l.Spec.RenewTime)
		}
		if len(stoodIn) != 1 || stoodIn[0] != 6*time.Second {
			t.Fatalf("stood in for %v, want once for a Lease 6 s old", stoodIn)
		}
	})
}

func TestHeartbeatRenewalRacingAnotherReplicaIsASuccess(t *testing.T) {
	h, broker, clk := heartbeat(10 * time.Second)
	renew(t, h, broker, clk)
	broker.PrependReactor("update", "leases", func(clienttesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewConflict(coordinationv1.Resource("leases"), record.LeaseName(testCluster), errors.New("the object has been modified"))
	})
	if err := h.renew(context.Background(), clk.Now()); err != nil {
		t.Fatalf("renew: %v, want success: another replica renewed the Lease", err)
	}
}

func TestHeartbeatSkipsTicksItIsToldTo(t *testing.T) {
	h, broker, _ := heartbeat(10 * time.Second)
	asked := make(chan struct{})
	var once sync.Once
	h.Skip = func(context.Context) bool { once.Do(func() { close(asked) }); return true }
	h.OnRenew = func(err error) { t.Errorf("OnRenew told %v of a skipped tick", err) }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); h.Run(ctx) }()
	<-asked
	cancel()
	<-done
	if len(broker.Actions()) != 0 {
		t.Fatalf("a skipped tick asked the broker %v", broker.Actions())
	}
}

func TestAStandInNeverCreatesTheLease(t *testing.T) {
	h, broker, clk := heartbeat(10 * time.Second)
	h.StaleAfter = 5 * time.Second
	if err := h.renew(context.Background(), clk.Now()); err != nil {
		t.Fatal(err)
	}
	for _, a := range broker.Actions() {
		if a.GetVerb() == "create" {
			t.Fatalf("a stand-in created the Lease: %v", broker.Actions())
		}
	}
}
