package realnode

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
	mcsinformers "sigs.k8s.io/mcs-api/pkg/client/informers/externalversions"
)

// importWatch watches one imported service in every member, its
// ServiceImport and the MCS EndpointSlices mcsd wrote for it, and keeps
// every moment the import was lost: an object deleted, or no ready
// endpoint left in a member.
type importWatch struct {
	stop chan struct{}

	mu     sync.Mutex
	events int
	losses []string
	// ready is each member's count of ready endpoints now.
	ready map[string]int
}

// watchImports starts the watch and waits until every member imports the
// service with at least one ready endpoint, which is the state that must
// hold from then on.
func (w *world) watchImports(ctx context.Context, t *testing.T, ns, name string) *importWatch {
	t.Helper()
	iw := &importWatch{stop: make(chan struct{}), ready: map[string]int{}}
	t.Cleanup(iw.close)
	var synced []cache.InformerSynced
	for _, m := range w.members {
		imports := mcsinformers.NewSharedInformerFactoryWithOptions(m.MCS, 0, mcsinformers.WithNamespace(ns),
			mcsinformers.WithTweakListOptions(func(o *metav1.ListOptions) { o.FieldSelector = "metadata.name=" + name })).
			Multicluster().V1beta1().ServiceImports().Informer()
		slices := informers.NewSharedInformerFactoryWithOptions(m.Kube, 0, informers.WithNamespace(ns),
			informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = mcsv1beta1.LabelServiceName + "=" + name })).
			Discovery().V1().EndpointSlices().Informer()
		cluster := m.Name
		if _, err := imports.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(any) { iw.event("", "") },
			UpdateFunc: func(any, any) { iw.event("", "") },
			DeleteFunc: func(obj any) { iw.event(cluster, fmt.Sprintf("ServiceImport %s/%s deleted", ns, name)) },
		}); err != nil {
			t.Fatal(err)
		}
		count := func() {
			n := 0
			for _, obj := range slices.GetStore().List() {
				for _, e := range obj.(*discoveryv1.EndpointSlice).Endpoints {
					if e.Conditions.Ready == nil || *e.Conditions.Ready {
						n += len(e.Addresses)
					}
				}
			}
			iw.count(cluster, n)
		}
		if _, err := slices.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(any) { count() },
			UpdateFunc: func(any, any) { count() },
			DeleteFunc: func(obj any) {
				key, _ := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
				iw.event(cluster, "EndpointSlice "+key+" deleted")
				count()
			},
		}); err != nil {
			t.Fatal(err)
		}
		go imports.Run(iw.stop)
		go slices.Run(iw.stop)
		synced = append(synced, imports.HasSynced, slices.HasSynced)
	}
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		t.Fatalf("watching the import of %s/%s: caches did not sync", ns, name)
	}
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		iw.mu.Lock()
		defer iw.mu.Unlock()
		for _, m := range w.members {
			if iw.ready[m.Name] == 0 {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		iw.mu.Lock()
		defer iw.mu.Unlock()
		t.Fatalf("%s/%s not imported with ready endpoints in every member (ready: %v, losses: %v): %v", ns, name, iw.ready, iw.losses, err)
	}
	// Before this moment the import was still settling: only what
	// happens from now on counts.
	iw.mu.Lock()
	iw.losses, iw.events = nil, 0
	iw.mu.Unlock()
	return iw
}

// event counts one change; loss, when set, says what a member lost.
func (iw *importWatch) event(cluster, loss string) {
	iw.mu.Lock()
	defer iw.mu.Unlock()
	iw.events++
	if loss != "" {
		iw.losses = append(iw.losses, fmt.Sprintf("%s at %s: %s", cluster, time.Now().Format(time.StampMilli), loss))
	}
}

// count records a member's ready endpoints, a loss when none is left
// after some were.
func (iw *importWatch) count(cluster string, n int) {
	iw.mu.Lock()
	had := iw.ready[cluster]
	iw.ready[cluster] = n
	iw.mu.Unlock()
	if had > 0 && n == 0 {
		iw.event(cluster, "no ready endpoint left")
		return
	}
	iw.event("", "")
}

func (iw *importWatch) close() {
	select {
	case <-iw.stop:
	default:
		close(iw.stop)
	}
}

// result stops the watch and returns how many changes it saw since the
// import settled and every loss.
func (iw *importWatch) result() (int, []string) {
	iw.close()
	iw.mu.Lock()
	defer iw.mu.Unlock()
	return iw.events, iw.losses
}
