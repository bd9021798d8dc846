// Package sliceapply makes a set of EndpointSlices in one namespace match
// what a controller wants: create what is missing, update what differs,
// delete what is extra, concurrently. The exporter (its slices on the
// broker) and the importer (MCS slices in its cluster) both reconcile this
// way; what "up to date" means and how an update is built stay theirs.
package sliceapply

import (
	"context"
	"errors"
	"fmt"
	"sync"

	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/mcsd-io/mcsd/internal/quotaretry"
)

// DefaultWorkers is how many writes of one Apply are made at once.
const DefaultWorkers = 4

// Applier writes EndpointSlices through Client.
type Applier struct {
	Client kubernetes.Interface
	// What names the slices in errors ("broker EndpointSlice").
	What string
	// UpToDate says whether have already holds what want says.
	UpToDate func(have, want *discoveryv1.EndpointSlice) bool
	// Update builds the object to write from have (the API server's or
	// the cache's copy, not to be modified) and want.
	Update func(have, want *discoveryv1.EndpointSlice) *discoveryv1.EndpointSlice
	// Wrote is told of every successful write ("create", "update",
	// "delete") with the object the API server returned (the deleted one
	// for a delete), and of a slice a create found up to date already
	// ("found"), for caches. Optional.
	Wrote func(operation string, s *discoveryv1.EndpointSlice)
	// Metrics, when set, counts every write by operation, of kind
	// "endpointslice".
	Metrics interface{ Wrote(kind, operation string) }
	// Workers (default DefaultWorkers).
	Workers int
}

// Apply makes namespace hold want, given have: the slices there now as the
// caller's cache has them. Slices of have that want does not name are
// deleted unless keepExtras. A slice whose address type changed is
// deleted; the next Apply creates it anew (the field is immutable). A
// create that finds the slice already there (the cache was behind) reads
// it and brings it up to date instead of failing.
func (a Applier) Apply(ctx context.Context, namespace string, want, have []*discoveryv1.EndpointSlice, keepExtras bool) error {
	byName := make(map[string]*discoveryv1.EndpointSlice, len(have))
	for _, s := range have {
		byName[s.Name] = s
	}
	var writes []func() error
	for _, w := range want {
		cur, ok := byName[w.Name]
		delete(byName, w.Name)
		switch {
		case !ok:
			writes = append(writes, func() error { return a.create(ctx, namespace, w) })
		case cur.AddressType != w.AddressType:
			writes = append(writes, func() error { return a.delete(ctx, cur) })
		case !a.UpToDate(cur, w):
			writes = append(writes, func() error { return a.update(ctx, cur, w) })
		}
	}
	if !keepExtras {
		for _, extra := range byName {
			writes = append(writes, func() error { return a.delete(ctx, extra) })
		}
	}
	return concurrently(writes, a.Workers)
}

// Delete deletes slices; one already gone is no error.
func (a Applier) Delete(ctx context.Context, slices []*discoveryv1.EndpointSlice) error {
	var writes []func() error
	for _, s := range slices {
		writes = append(writes, func() error { return a.delete(ctx, s) })
	}
	return concurrently(writes, a.Workers)
}

func (a Applier) create(ctx context.Context, namespace string, w *discoveryv1.EndpointSlice) error {
	obj := w.DeepCopy()
	obj.Namespace = namespace
	api := a.Client.DiscoveryV1().EndpointSlices(namespace)
	var created *discoveryv1.EndpointSlice
	err := quotaretry.Write(ctx, func() (err error) {
		created, err = api.Create(ctx, obj, metav1.CreateOptions{})
		return err
	})
	if apierrors.IsAlreadyExists(err) {
		// What the API server holds may be stale: read it and bring it
		// up to date now rather than take it for what was wanted.
		cur, err := api.Get(ctx, obj.Name, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("reading %s %s/%s, which exists but is not cached yet: %w", a.What, namespace, obj.Name, err)
		}
		if a.UpToDate(cur, obj) {
			a.wrote("found", cur)
			return nil
		}
		return a.update(ctx, cur, obj)
	}
	if err != nil {
		return fmt.Errorf("creating %s %s/%s: %w", a.What, namespace, obj.Name, err)
	}
	a.wrote("create", created)
	return nil
}

func (a Applier) update(ctx context.Context, cur, w *discoveryv1.EndpointSlice) error {
	upd := a.Update(cur, w)
	updated, err := a.Client.DiscoveryV1().EndpointSlices(upd.Namespace).Update(ctx, upd, metav1.UpdateOptions{})
	if err != nil {
		return fmt.Errorf("updating %s %s/%s: %w", a.What, upd.Namespace, upd.Name, err)
	}
	a.wrote("update", updated)
	return nil
}

func (a Applier) delete(ctx context.Context, s *discoveryv1.EndpointSlice) error {
	err := a.Client.DiscoveryV1().EndpointSlices(s.Namespace).Delete(ctx, s.Name, metav1.DeleteOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("deleting %s %s/%s: %w", a.What, s.Namespace, s.Name, err)
	}
	a.wrote("delete", s)
	return nil
}

func (a Applier) wrote(operation string, s *discoveryv1.EndpointSlice) {
	if a.Metrics != nil && operation != "found" {
		a.Metrics.Wrote("endpointslice", operation)
	}
	if a.Wrote != nil {
		a.Wrote(operation, s)
	}
}

// concurrently runs fns, at most n at a time, and joins their errors.
func concurrently(fns []func() error, n int) error {
	if n <= 0 {
		n = DefaultWorkers
	}
	if len(fns) <= 1 {
		for _, fn := range fns {
			return fn()
		}
		return nil
	}
	errs := make([]error, len(fns))
	sem := make(chan struct{}, n)
	var wg sync.WaitGroup
	for i, fn := range fns {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			errs[i] = fn()
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}
