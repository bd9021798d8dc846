package proxier

import (
	"testing"

	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	mcsclient "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned"
	mcsinformers "sigs.k8s.io/mcs-api/pkg/client/informers/externalversions"
)

// StartFeed starts informers on kube and mcs, p's sync loop and a Feed
// between them, and returns the Feed once it has handed p both initial
// lists. Everything stops with t's context. It is exported for the
// package's external tests.
func StartFeed(t *testing.T, kube kubernetes.Interface, mcs mcsclient.Interface, p Provider) *Feed {
	t.Helper()
	ctx := t.Context()
	kubeInformers, mcsInformers := informers.NewSharedInformerFactory(kube, 0), mcsinformers.NewSharedInformerFactory(mcs, 0)
	feed, err := NewFeed(mcsInformers.Multicluster().V1beta1().ServiceImports().Informer(),
		kubeInformers.Discovery().V1().EndpointSlices().Informer(), p)
	if err != nil {
		t.Fatal(err)
	}
	kubeInformers.Start(ctx.Done())
	mcsInformers.Start(ctx.Done())
	go p.SyncLoop(ctx)
	if !feed.Run(ctx) {
		t.Fatal("the feed did not sync")
	}
	return feed
}
