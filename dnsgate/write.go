package dnsgate

import (
	"context"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
)

// leaseWriter keeps one Lease of the gate (a node's report, or the
// cluster's summary): written when what it says changes and never else,
// from the Lease it last wrote (a read only after a conflict).
type leaseWriter struct {
	client    kubernetes.Interface
	namespace string
	name      string
	// holder is the Lease's holder; component its LabelComponent.
	holder, component string
	clock             clock.Clock
	lease             *coordinationv1.Lease
}

// write stores what annotate sets in the Lease, creating it if need be.
func (w *leaseWriter) write(ctx context.Context, annotate func(*coordinationv1.Lease)) error {
	leases := w.client.CoordinationV1().Leases(w.namespace)
	for attempt := 0; ; attempt++ {
		cur, exists := w.lease, w.lease != nil
		if cur == nil {
			got, err := leases.Get(ctx, w.name, metav1.GetOptions{})
			switch {
			case apierrors.IsNotFound(err):
				cur = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: w.namespace, Name: w.name}}
			case err != nil:
				return fmt.Errorf("reading Lease %s/%s: %w", w.namespace, w.name, err)
			default:
				cur, exists = got, true
			}
		}
		next := cur.DeepCopy()
		if next.Labels == nil {
			next.Labels = map[string]string{}
		}
		next.Labels[LabelComponent] = w.component
		next.Spec.HolderIdentity = ptr.To(w.holder)
		// Not a lease that expires: what it says holds until it changes.
		next.Spec.LeaseDurationSeconds = nil
		next.Spec.RenewTime = &metav1.MicroTime{Time: w.clock.Now()}
		annotate(next)
		var err error
		var stored *coordinationv1.Lease
		if !exists {
			stored, err = leases.Create(ctx, next, metav1.CreateOptions{})
		} else {
			stored, err = leases.Update(ctx, next, metav1.UpdateOptions{})
		}
		if err == nil {
			w.lease = stored
			return nil
		}
		w.lease = nil
		if attempt == 0 && (apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) || apierrors.IsNotFound(err)) {
			continue
		}
		return fmt.Errorf("writing Lease %s/%s: %w", w.namespace, w.name, err)
	}
}

// Writing is how a gate Lease is written: at most one write every
// MinWrite (default DefaultMinWrite), listing at most MaxPending
// ClusterSetIPs, on Clock, logging to Logger.
type Writing struct {
	MinWrite   time.Duration
	MaxPending int
	Clock      clock.WithTicker
	Logger     klog.Logger
}

// withDefaults fills what is unset: maxPending, and a logger named name.
func (w Writing) withDefaults(maxPending int, name string) Writing {
	if w.MinWrite <= 0 {
		w.MinWrite = DefaultMinWrite
	}
	if w.MaxPending <= 0 {
		w.MaxPending = maxPending
	}
	if w.Clock == nil {
		w.Clock = clock.RealClock{}
	}
	if w.Logger.GetSink() == nil {
		w.Logger = klog.Background().WithName(name)
	}
	return w
}
