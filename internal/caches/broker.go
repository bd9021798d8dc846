package caches

import (
	"context"
	"errors"
	"io"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	mcsclient "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned"
	mcsinformers "sigs.k8s.io/mcs-api/pkg/client/informers/externalversions"

	"github.com/mcsd-io/mcsd/internal/cacheobj"
	"github.com/mcsd-io/mcsd/internal/record"
)

// Broker are the informers on the broker. Every cluster's export records,
// EndpointSlices and heartbeat Leases are read across the members'
// namespaces, each kind selected by the labels its writer puts on it, and
// count only in their writer's namespace (record.OnlyMembers makes
// anything elsewhere anonymous); this cluster's own slices are read in its
// member namespace; the ClusterSetIP block claims, the members'
// declarations, the export rules and the settings in the broker namespace.
type Broker struct {
	// OnWatchError, when set, is called for every watch failure that is not
	// routine (a watch that ended or expired is): the liveness
	// controller's probe then asks at once whether the broker answers.
	OnWatchError func()

	// namespace is the broker namespace.
	namespace string

	records, recordObjects       mcsinformers.SharedInformerFactory
	slices, ownSlices            informers.SharedInformerFactory
	leases, claims, decls, rules informers.SharedInformerFactory
	settings                     informers.SharedInformerFactory
}

// NewBroker returns the broker informers of cluster, read through kube and
// mcs (clients whose connections may wait at a dial gate) with namespace
// the broker namespace, each resynced every resync.
func NewBroker(kube kubernetes.Interface, mcs mcsclient.Interface, namespace, cluster string, resync time.Duration) *Broker {
	kubeIn := func(ns, selector string) informers.SharedInformerFactory {
		return informers.NewSharedInformerFactoryWithOptions(kube, resync, informers.WithNamespace(ns),
			informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = selector }))
	}
	mcsIn := func(ns, selector string) mcsinformers.SharedInformerFactory {
		return mcsinformers.NewSharedInformerFactoryWithOptions(mcs, resync, mcsinformers.WithNamespace(ns),
			mcsinformers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = selector }))
	}
	return &Broker{
		namespace:     namespace,
		records:       mcsIn(metav1.NamespaceAll, record.LabelServiceNamespace),
		recordObjects: mcsIn(metav1.NamespaceAll, record.LabelServiceNamespace),
		slices: kubeIn(metav1.NamespaceAll, labels.SelectorFromSet(labels.Set{record.LabelManagedBy: record.EndpointSliceManager}).String()+
			","+record.LabelServiceNamespace),
		ownSlices: kubeIn(record.MemberNamespace(namespace, cluster), record.ClusterSelector(cluster).String()),
		leases:    kubeIn(metav1.NamespaceAll, record.LabelSourceCluster),
		claims:    kubeIn(namespace, record.LabelClaim),
		decls:     kubeIn(namespace, record.LabelDeclaration),
		rules:     kubeIn(namespace, record.LabelExportRule),
		settings: informers.NewSharedInformerFactoryWithOptions(kube, resync, informers.WithNamespace(namespace),
			informers.WithTweakListOptions(func(o *metav1.ListOptions) {
				o.FieldSelector = fields.OneTermEqualSelector("metadata.name", record.SettingsName).String()
			})),
	}
}

// Records are every cluster's export records, kept decoded (record.Cached):
// what readers of the merge need, in a fraction of the memory.
func (b *Broker) Records() cache.SharedIndexInformer {
	return b.prepare(b.records.Multicluster().V1beta1().ServiceImports().Informer(), b.onlyMembers(record.CacheTransform))
}

// RecordObjects are the same records whole: the exporter writes its own
// from them, keeping what others put on them.
func (b *Broker) RecordObjects() cache.SharedIndexInformer {
	return b.prepare(b.recordObjects.Multicluster().V1beta1().ServiceImports().Informer(), b.onlyMembers(cacheobj.ManagedFields))
}

// Slices are every cluster's broker EndpointSlices, read for their
// endpoints only.
func (b *Broker) Slices() cache.SharedIndexInformer {
	return b.prepare(b.slices.Discovery().V1().EndpointSlices().Informer(), b.onlyMembers(cacheobj.RemoteEndpointSlice))
}

// OwnSlices are this cluster's broker EndpointSlices, whole, to update in
// place.
func (b *Broker) OwnSlices() cache.SharedIndexInformer {
	return b.prepare(b.ownSlices.Discovery().V1().EndpointSlices().Informer(), cacheobj.ManagedFields)
}

// Leases are every cluster's heartbeat Leases.
func (b *Broker) Leases() cache.SharedIndexInformer {
	return b.prepare(b.leases.Coordination().V1().Leases().Informer(), b.onlyMembers(cacheobj.ManagedFields))
}

// Claims are every cluster's ClusterSetIP block claims.
func (b *Broker) Claims() cache.SharedIndexInformer {
	return b.prepare(b.claims.Core().V1().ConfigMaps().Informer(), cacheobj.ConfigMap)
}

// Declarations are the members' declarations (their pod CIDRs).
func (b *Broker) Declarations() cache.SharedIndexInformer {
	return b.prepare(b.decls.Core().V1().ConfigMaps().Informer(), cacheobj.ConfigMap)
}

// ExportRules are the broker's export rules (which members may export
// which namespaces).
func (b *Broker) ExportRules() cache.SharedIndexInformer {
	return b.prepare(b.rules.Core().V1().ConfigMaps().Informer(), cacheobj.ConfigMap)
}

// Settings is the broker's settings ConfigMap alone (record.SettingsName),
// whose clusterset ranges a running member compares with its own.
func (b *Broker) Settings() cache.SharedIndexInformer {
	return b.prepare(b.settings.Core().V1().ConfigMaps().Informer(), cacheobj.ConfigMap)
}

// onlyMembers wraps transform for a kind read across every namespace: an
// object outside its writer's member namespace is kept anonymous.
func (b *Broker) onlyMembers(transform cache.TransformFunc) cache.TransformFunc {
	return record.OnlyMembers(b.namespace, transform)
}

// prepare sets an informer's transform and watch-error handler. Both can
// only be set before the informer starts; a second call, when a controller
// of a later leadership term asks again, changes nothing.
func (b *Broker) prepare(inf cache.SharedIndexInformer, transform cache.TransformFunc) cache.SharedIndexInformer {
	_ = inf.SetWatchErrorHandlerWithContext(b.watchErrorHandler)
	return prepare(inf, transform)
}

// watchErrorHandler logs a broker watch failure as client-go does, and
// tells OnWatchError unless the watch simply ended or expired, which says
// nothing about the broker.
func (b *Broker) watchErrorHandler(ctx context.Context, r *cache.Reflector, err error) {
	cache.DefaultWatchErrorHandler(ctx, r, err)
	if b.OnWatchError == nil || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
		return
	}
	b.OnWatchError()
}

// Start starts every informer asked for so far.
func (b *Broker) Start(stop <-chan struct{}) {
	for _, f := range b.factories() {
		f.Start(stop)
	}
}

// Shutdown stops the informers and waits for them.
func (b *Broker) Shutdown() {
	for _, f := range b.factories() {
		f.Shutdown()
	}
}

func (b *Broker) factories() []factory {
	return []factory{b.records, b.recordObjects, b.slices, b.ownSlices, b.leases, b.claims, b.decls, b.rules, b.settings}
}

// factory is what Start and Shutdown need of an informer factory.
type factory interface {
	Start(stop <-chan struct{})
	Shutdown()
}
