package record

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/mcsd-io/mcsd/internal/cacheobj"
)

// Cached is an export record as a reader's informer cache keeps it: the
// object's name, namespace and labels (for keys and indexes) and what the
// record decodes to. Decoding once when the record arrives, and keeping
// only that, takes a fraction of the memory of the whole object (its
// annotations, status and bookkeeping), which at tens of thousands of
// records is most of an importer's cache.
type Cached struct {
	metav1.ObjectMeta
	// Export is what the record says, when it is valid.
	Export Export
	// Invalid is why the record cannot be read; nil when it can.
	Invalid error
}

// GetObjectKind makes Cached a runtime.Object; it has no kind of its own.
func (c *Cached) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

// DeepCopyObject makes Cached a runtime.Object.
func (c *Cached) DeepCopyObject() runtime.Object {
	out := &Cached{Export: c.Export.DeepCopy(), Invalid: c.Invalid}
	c.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	return out
}

// CacheTransform is an informer transform (cache.TransformFunc) that turns
// each export record into a *Cached. Other objects pass unchanged, and so
// does a deletion the informer only learnt of on relist.
func CacheTransform(obj any) (any, error) {
	si, ok := obj.(*mcsv1beta1.ServiceImport)
	if !ok {
		return obj, nil
	}
	// Interned first, so that the Export's cluster, namespace and name,
	// read from the labels, share their bytes too.
	si.Labels = cacheobj.SharedLabels(si.Labels)
	c := &Cached{ObjectMeta: metav1.ObjectMeta{
		Name:            si.Name,
		Namespace:       si.Namespace,
		Labels:          si.Labels,
		ResourceVersion: si.ResourceVersion,
		// The cap on records per cluster keeps the oldest by when the
		// broker first stored them.
		CreationTimestamp: StoredAt(si),
	}}
	c.Export, c.Invalid = Decode(si)
	return c, nil
}
