package caches

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	mcsclient "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned"
	mcsinformers "sigs.k8s.io/mcs-api/pkg/client/informers/externalversions"

	"github.com/mcsd-io/mcsd/internal/cacheobj"
	"github.com/mcsd-io/mcsd/internal/record"
)

// Local are the informers on the member cluster: ServiceExports, Services
// and the core EndpointSlices the exporter reads; the namespaces,
// ServiceImports and MCS EndpointSlices the importer reads and writes; the
// ServiceImports and MCS EndpointSlices a node's data plane reads.
type Local struct {
	// importsFrom holds the ServiceImport and MCS EndpointSlice
	// informers: this Local, or the one of LocalOptions.ImportsFrom.
	importsFrom *Local

	mcs mcsinformers.SharedInformerFactory
	// imports is mcs without the broker's records: a member that is also
	// the broker holds every member's records, which are ServiceImports
	// too, in its member namespaces.
	imports   mcsinformers.SharedInformerFactory
	kube      informers.SharedInformerFactory
	mcsSlices informers.SharedInformerFactory
	// sliceTransform is what the MCS EndpointSlice cache keeps.
	sliceTransform cache.TransformFunc
}

// LocalOptions say how a Local reads MCS EndpointSlices, which the importer
// writes and the data plane reads.
type LocalOptions struct {
	// SliceSelector selects the MCS EndpointSlices to cache, such as
	// mcsslice.Selector (every MCS slice: a data plane's view) or
	// mcsslice.ImporterSelector (those mcsd's importer writes, which a
	// data plane shares with the importer of its process).
	SliceSelector string
	// SliceTransform is what their cache keeps (nil: all but
	// managedFields, as a data plane needs them).
	SliceTransform cache.TransformFunc
	// ImportsFrom, when set, is another Local whose ServiceImports and MCS
	// EndpointSlices this one hands out instead of watching them again:
	// one cache of them for the node agent and the importer of one
	// process. Its owner starts and stops them; the options above are its.
	ImportsFrom *Local
}

// NewLocal returns the informers of the member cluster reached through
// kube and mcs, each resynced every resync (0: never).
func NewLocal(kube kubernetes.Interface, mcs mcsclient.Interface, resync time.Duration, o LocalOptions) *Local {
	if o.SliceTransform == nil {
		o.SliceTransform = cacheobj.ManagedFields
	}
	l := &Local{
		mcs: mcsinformers.NewSharedInformerFactory(mcs, resync),
		imports: mcsinformers.NewSharedInformerFactoryWithOptions(mcs, resync,
			mcsinformers.WithTweakListOptions(func(lo *metav1.ListOptions) { lo.LabelSelector = NotBrokerRecords })),
		kube: informers.NewSharedInformerFactory(kube, resync),
		mcsSlices: informers.NewSharedInformerFactoryWithOptions(kube, resync,
			informers.WithTweakListOptions(func(lo *metav1.ListOptions) { lo.LabelSelector = o.SliceSelector })),
		sliceTransform: o.SliceTransform,
	}
	l.importsFrom = l
	if o.ImportsFrom != nil {
		l.importsFrom = o.ImportsFrom
	}
	return l
}

// Exports are the cluster's ServiceExports.
func (l *Local) Exports() cache.SharedIndexInformer {
	return prepare(l.mcs.Multicluster().V1beta1().ServiceExports().Informer(), cacheobj.ManagedFields)
}

// Services are the cluster's Services.
func (l *Local) Services() cache.SharedIndexInformer {
	return prepare(l.kube.Core().V1().Services().Informer(), cacheobj.ManagedFields)
}

// EndpointSlices are every EndpointSlice of the cluster, read for their
// endpoints only and never written back: the exporter mirrors the core
// controller's.
func (l *Local) EndpointSlices() cache.SharedIndexInformer {
	return prepare(l.kube.Discovery().V1().EndpointSlices().Informer(), cacheobj.RemoteEndpointSlice)
}

// Namespaces are the cluster's namespaces: a service is imported where its
// namespace exists.
func (l *Local) Namespaces() cache.SharedIndexInformer {
	return prepare(l.kube.Core().V1().Namespaces().Informer(), cacheobj.ManagedFields)
}

// NotBrokerRecords selects the ServiceImports of a member cluster that are
// not a broker's records (record.LabelServiceNamespace marks those).
const NotBrokerRecords = "!" + record.LabelServiceNamespace

// Imports are the cluster's ServiceImports, but the broker's records.
func (l *Local) Imports() cache.SharedIndexInformer {
	from := l.importsFrom
	return prepare(from.imports.Multicluster().V1beta1().ServiceImports().Informer(), cacheobj.ManagedFields)
}

// MCSSlices are the MCS EndpointSlices of LocalOptions.SliceSelector.
func (l *Local) MCSSlices() cache.SharedIndexInformer {
	from := l.importsFrom
	return prepare(from.mcsSlices.Discovery().V1().EndpointSlices().Informer(), from.sliceTransform)
}

// Start starts every informer of this Local asked for so far (not those of
// ImportsFrom); starting one already started is harmless.
func (l *Local) Start(stop <-chan struct{}) {
	for _, f := range []factory{l.mcs, l.imports, l.kube, l.mcsSlices} {
		f.Start(stop)
	}
}

// Shutdown stops the informers and waits for them.
func (l *Local) Shutdown() {
	for _, f := range []factory{l.mcs, l.imports, l.kube, l.mcsSlices} {
		f.Shutdown()
	}
}

// prepare sets an informer's transform; see Broker.prepare.
func prepare(inf cache.SharedIndexInformer, transform cache.TransformFunc) cache.SharedIndexInformer {
	_ = inf.SetTransform(transform)
	return inf
}
