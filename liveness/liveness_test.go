package liveness

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2"

	"github.com/mcsd-io/mcsd/mcsslice"
)

func TestStateRoundTrip(t *testing.T) {
	lastContact := time.Date(2026, 11, 26, 8, 0, 0, 0, time.UTC)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{"someone/else": "kept"}}}
	s := State{Clusters: map[string]string{"east": Live, "west": Gone}, BrokerReachable: false, BrokerLastContact: lastContact}
	if !s.Apply(cm) {
		t.Fatal("applying to an empty ConfigMap changed nothing")
	}
	if s.Apply(cm) {
		t.Fatal("applying the same state twice changed something the second time")
	}
	got := Read(cm)
	if got.GoneClusters().String() != "west" || got.BrokerReachable || !got.BrokerLastContact.Equal(lastContact) {
		t.Fatalf("read back %+v", got)
	}
	if cm.Annotations["someone/else"] != "kept" {
		t.Fatal("another writer's annotation was dropped")
	}

	s = State{Clusters: map[string]string{"east": Live}, BrokerReachable: true}
	if !s.Apply(cm) {
		t.Fatal("west leaving and the broker answering changed nothing")
	}
	if _, ok := cm.Annotations[AnnotationBrokerLastContact]; ok || cm.Annotations[AnnotationBrokerReachable] != "true" {
		t.Fatalf("annotations %v once the broker answers", cm.Annotations)
	}
	if _, ok := cm.Data["west"]; ok {
		t.Fatalf("data %v still names west", cm.Data)
	}
}

func TestReadTakesUnknownWordsForLive(t *testing.T) {
	cm := &corev1.ConfigMap{Data: map[string]string{"east": "gone", "west": " Gone\n", "north": ""}}
	if gone := Read(cm).GoneClusters(); gone.String() != "west" {
		t.Fatalf("gone %v, want only west (exactly Gone, whitespace aside)", gone)
	}
	if s := Read(nil); !s.BrokerReachable || s.GoneClusters().Len() != 0 {
		t.Fatalf("no ConfigMap reads as %+v", s)
	}
}

func TestWatcherReportsChanges(t *testing.T) {
	kube := fake.NewClientset(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "mcsd-system", Name: "unrelated"}, Data: map[string]string{"east": Gone}})
	reports := make(chan mcsslice.GoneClusters, 10)
	w, err := NewWatcher(klog.Background(), kube, "mcsd-system", func(gone mcsslice.GoneClusters) { reports <- gone })
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go w.Run(ctx)
	next := func(what string) mcsslice.GoneClusters {
		t.Helper()
		select {
		case g := <-reports:
			return g
		case <-time.After(30 * time.Second):
			t.Fatalf("no report %s", what)
			return mcsslice.GoneClusters{}
		}
	}
	if g := next("at start"); g.Len() != 0 {
		t.Fatalf("at start, without the ConfigMap: %v", g)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "mcsd-system", Name: ConfigMapName}, Data: map[string]string{"east": Live, "west": Gone}}
	if _, err := kube.CoreV1().ConfigMaps("mcsd-system").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if g := next("after create"); g.String() != "west" {
		t.Fatalf("after create: %v", g)
	}
	cm.Data["east"] = Gone
	if _, err := kube.CoreV1().ConfigMaps("mcsd-system").Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if g := next("after east died"); g.String() != "east, west" {
		t.Fatalf("after east died: %v", g)
	}
	if err := kube.CoreV1().ConfigMaps("mcsd-system").Delete(ctx, ConfigMapName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if g := next("after delete"); g.Len() != 0 {
		t.Fatalf("after delete: %v", g)
	}
}

func TestASlowSubscriberDelaysNoOther(t *testing.T) {
	kube := fake.NewClientset(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: ConfigMapName}, Data: map[string]string{"east": Gone}})
	release := make(chan struct{})
	fast := make(chan mcsslice.GoneClusters, 10)
	w, err := NewWatcher(klog.Background(), kube, "ns",
		func(mcsslice.GoneClusters) { <-release },
		func(gone mcsslice.GoneClusters) { fast <- gone },
	)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer func() { close(release); cancel() }()
	go w.Run(ctx)
	select {
	case g := <-fast:
		if g.String() != "east" {
			t.Fatalf("fast subscriber got %v", g)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the fast subscriber waited for the slow one")
	}
}
