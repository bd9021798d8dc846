package dnsgate

import (
	"context"
	"fmt"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// writer keeps this node's report Lease: written when the report changes
// and never else (whether the node is alive is its pod's readiness), from
// the Lease it last wrote (a read only after a conflict).
type writer struct {
	g     *Gate
	lease *coordinationv1.Lease
	last  Report
}

func newWriter(g *Gate) *writer { return &writer{g: g} }

func (w *writer) write(ctx context.Context, r Report) error {
	cfg := w.g.cfg
	now := cfg.Clock.Now()
	if w.lease != nil && r.equal(w.last) {
		return nil
	}
	leases := cfg.Client.CoordinationV1().Leases(cfg.Namespace)
	name := LeaseName(cfg.NodeName)
	for attempt := 0; ; attempt++ {
		cur, exists := w.lease, w.lease != nil
		if cur == nil {
			got, err := leases.Get(ctx, name, metav1.GetOptions{})
			switch {
			case apierrors.IsNotFound(err):
				cur = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: cfg.Namespace, Name: name}}
			case err != nil:
				return fmt.Errorf("reading Lease %s/%s: %w", cfg.Namespace, name, err)
			default:
				cur, exists = got, true
			}
		}
		next := cur.DeepCopy()
		if next.Labels == nil {
			next.Labels = map[string]string{}
		}
		next.Labels[LabelComponent] = ComponentNodeReport
		next.Spec.HolderIdentity = ptr.To(cfg.NodeName)
		// Not a lease that expires: the report holds until it changes.
		next.Spec.LeaseDurationSeconds = nil
		next.Spec.RenewTime = &metav1.MicroTime{Time: now}
		r.annotate(next)
		var err error
		var stored *coordinationv1.Lease
		if !exists {
			stored, err = leases.Create(ctx, next, metav1.CreateOptions{})
		} else {
			stored, err = leases.Update(ctx, next, metav1.UpdateOptions{})
		}
		if err == nil {
			w.lease, w.last = stored, r
			return nil
		}
		w.lease = nil
		if attempt == 0 && (apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) || apierrors.IsNotFound(err)) {
			continue
		}
		return fmt.Errorf("writing Lease %s/%s: %w", cfg.Namespace, name, err)
	}
}
