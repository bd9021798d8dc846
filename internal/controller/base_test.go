package controller

import (
	"context"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
)

func TestNewBaseRefusesAControllerWithoutIdentity(t *testing.T) {
	if _, err := NewBase("test", Shared{BrokerNamespace: "b"}, NewMetrics(nil, MetricsOpts{})); err == nil {
		t.Fatal("a controller without a cluster ID was built")
	}
	b, err := NewBase("test", Shared{ClusterID: "east", BrokerNamespace: "b"}, NewMetrics(nil, MetricsOpts{}))
	if err != nil {
		t.Fatal(err)
	}
	if b.Workers != DefaultWorkers || b.Recorder == nil || b.Clock == nil {
		t.Fatalf("defaults not filled in: %+v", b.Shared)
	}
}

// A controller runs on informers it does not own: it syncs each key its
// handlers enqueue with the key split and the service in its logger, and
// leaves no handler behind when it stops, as a controller of a leadership
// term that ended must not.
func TestRunSyncsEnqueuedKeysAndReleasesItsHandlers(t *testing.T) {
	kube := kubefake.NewClientset(&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "cart"}})
	factory := informers.NewSharedInformerFactory(kube, 0)
	inf := factory.Core().V1().Services().Informer()
	b, err := NewBase("test", Shared{ClusterID: "east", BrokerNamespace: "b"}, NewMetrics(nil, MetricsOpts{}))
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Handle(inf, OnAny(b.EnqueueObject)); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var synced []string
	informersCtx, stopInformers := context.WithCancel(context.Background())
	defer factory.Shutdown()
	defer stopInformers()
	ctx, cancel := context.WithCancel(informersCtx)
	done := make(chan error, 1)
	go func() {
		done <- b.Run(ctx, "Testing", func(context.Context) error { return nil }, func(ctx context.Context, namespace, name string) error {
			mu.Lock()
			defer mu.Unlock()
			synced = append(synced, namespace+"/"+name)
			if !klog.FromContext(ctx).Enabled() {
				t.Error("no logger in the sync's context")
			}
			return nil
		})
	}()
	factory.Start(informersCtx.Done())
	if err := wait.PollUntilContextTimeout(ctx, time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		return b.Synced() && len(synced) == 1, nil
	}); err != nil {
		t.Fatalf("synced %v, Synced() %v", synced, b.Synced())
	}
	if synced[0] != "shop/cart" {
		t.Fatalf("synced %v, want shop/cart", synced)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// The informer lives on; what it sees now reaches no handler of the
	// stopped controller.
	b.Queue = workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]())
	if _, err := kube.CoreV1().Services("shop").Create(informersCtx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "late"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(informersCtx, time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		_, ok, _ := inf.GetIndexer().GetByKey("shop/late")
		return ok, nil
	}); err != nil {
		t.Fatal("the informer never saw the new Service")
	}
	if n := b.Queue.Len(); n != 0 {
		t.Fatalf("a stopped controller's handler enqueued %d keys", n)
	}
}

func TestAddIndexKeepsAnIndexAnEarlierControllerAdded(t *testing.T) {
	inf := informers.NewSharedInformerFactory(kubefake.NewClientset(), 0).Core().V1().Services().Informer()
	byName := func(obj any) ([]string, error) { return []string{obj.(*corev1.Service).Name}, nil }
	for range 2 {
		if err := AddIndex(inf, "name", byName); err != nil {
			t.Fatalf("adding the index a second time: %v", err)
		}
	}
	if _, ok := inf.GetIndexer().GetIndexers()["name"]; !ok {
		t.Fatal("no index")
	}
}
