package proxier_test

import (
	"context"
	"slices"
	"sync"
	"testing"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	kubefake "k8s.io/client-go/kubernetes/fake"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
	mcsfake "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned/fake"
	mcsinformers "sigs.k8s.io/mcs-api/pkg/client/informers/externalversions"

	"github.com/mcsd-io/mcsd/proxier"
)

// recorder is a Provider that lists the calls it gets.
type recorder struct {
	mu      sync.Mutex
	calls   []string
	changed chan struct{}
}

func (r *recorder) add(call string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, call)
	select {
	case r.changed <- struct{}{}:
	default:
	}
}

// waitFor waits until the provider has been told call, or ctx ends.
func (r *recorder) waitFor(ctx context.Context, call string) bool {
	for !r.has(call) {
		select {
		case <-r.changed:
		case <-ctx.Done():
			return false
		}
	}
	return true
}

func (r *recorder) has(call string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Contains(r.calls, call)
}

func (r *recorder) OnServiceImportAdd(si *mcsv1beta1.ServiceImport) { r.add("import add " + si.Name) }
func (r *recorder) OnServiceImportUpdate(_, si *mcsv1beta1.ServiceImport) {
	r.add("import update " + si.Name)
}
func (r *recorder) OnServiceImportDelete(si *mcsv1beta1.ServiceImport) {
	r.add("import delete " + si.Name)
}
func (r *recorder) OnServiceImportsSynced()                         { r.add("imports synced") }
func (r *recorder) OnEndpointSliceAdd(s *discoveryv1.EndpointSlice) { r.add("slice add " + s.Name) }
func (r *recorder) OnEndpointSliceUpdate(_, s *discoveryv1.EndpointSlice) {
	r.add("slice update " + s.Name)
}
func (r *recorder) OnEndpointSliceDelete(s *discoveryv1.EndpointSlice) {
	r.add("slice delete " + s.Name)
}
func (r *recorder) OnEndpointSlicesSynced()  { r.add("slices synced") }
func (r *recorder) Sync()                    {}
func (r *recorder) SyncLoop(context.Context) {}

func TestFeed(t *testing.T) {
	si := &mcsv1beta1.ServiceImport{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web"}}
	slice := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web-west"}}
	kube, mcs := kubefake.NewClientset(slice), mcsfake.NewSimpleClientset(si)
	kubeInformers, mcsInformers := informers.NewSharedInformerFactory(kube, 0), mcsinformers.NewSharedInformerFactory(mcs, 0)
	rec := &recorder{changed: make(chan struct{}, 1)}
	feed, err := proxier.NewFeed(mcsInformers.Multicluster().V1beta1().ServiceImports().Informer(),
		kubeInformers.Discovery().V1().EndpointSlices().Informer(), rec)
	if err != nil {
		t.Fatal(err)
	}
	kubeInformers.Start(t.Context().Done())
	mcsInformers.Start(t.Context().Done())
	if !feed.Run(t.Context()) || !feed.HasSynced() {
		t.Fatal("the feed did not sync")
	}
	for _, want := range []string{"import add web", "slice add web-west", "imports synced", "slices synced"} {
		if !rec.has(want) {
			t.Errorf("the provider was not told %q; it got %v", want, rec.calls)
		}
	}
	if err := kube.DiscoveryV1().EndpointSlices("ns").Delete(t.Context(), slice.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := mcs.MulticlusterV1beta1().ServiceImports("ns").Delete(t.Context(), si.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"slice delete web-west", "import delete web"} {
		if !rec.waitFor(t.Context(), want) {
			t.Errorf("the provider was not told %q", want)
		}
	}
}
