package exporter

import (
	"context"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/mcsd-io/mcsd/internal/record"
)

// Heartbeat keeps this cluster's Lease on the broker renewed. Importers in
// other clusters drop this cluster's endpoints when the Lease stops
// changing, so a dead cluster stops receiving traffic in bounded time.
type Heartbeat struct {
	Broker    kubernetes.Interface
	Namespace string
	Name      string
	ClusterID string
	Duration  time.Duration
	Interval  time.Duration
	Clock     clock.Clock
	// Version is the running mcsd's version, written on the Lease as the
	// annotation record.AnnotationLeaseVersion for operators (kubectl mcs
	// status);
	// empty writes none.
	Version string
	// OnRenew, when set, is told the outcome of every renewal (for metrics
	// and health).
	OnRenew func(err error)
	// StaleAfter, when set, makes this heartbeat a stand-in for another
	// one: it renews only a Lease last renewed at least this long ago, so
	// that a cluster whose leader died without releasing its election
	// stays alive for the others while a standby waits to lead.
	StaleAfter time.Duration
	// Skip, when set, is asked before each tick; true skips it, unreported
	// to OnRenew.
	Skip func(ctx context.Context) bool
	// OnStoodIn, when set, is told of each renewal made for a stale Lease
	// (with StaleAfter), with the age it renewed.
	OnStoodIn func(age time.Duration)
}

// Run renews the Lease every Interval until ctx ends. Failures are logged
// and retried on the next tick; the Lease is left in place on exit, so a
// restart within Duration is not seen as an outage.
func (h *Heartbeat) Run(ctx context.Context) {
	clk := h.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	wait.JitterUntilWithContext(ctx, func(ctx context.Context) {
		if h.Skip != nil && h.Skip(ctx) {
			return
		}
		err := h.renew(ctx, clk.Now())
		if err != nil {
			klog.FromContext(ctx).Error(err, "Renewing the broker Lease failed; other clusters drop this cluster's endpoints if it stays failed", "lease", klog.KRef(h.Namespace, h.Name), "leaseDuration", h.Duration)
		}
		if h.OnRenew != nil {
			h.OnRenew(err)
		}
	}, h.Interval, 0.1, true)
}

func (h *Heartbeat) renew(ctx context.Context, now time.Time) error {
	leases := h.Broker.CoordinationV1().Leases(h.Namespace)
	seconds := int32(h.Duration / time.Second)
	if seconds < 1 {
		seconds = 1
	}
	lease, err := leases.Get(ctx, h.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) && h.StaleAfter > 0 {
		// A stand-in keeps alive only a cluster that a leader brought
		// up; creating the Lease is the leader's, and the member's quota
		// holds one.
		return nil
	}
	if apierrors.IsNotFound(err) {
		_, err = leases.Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: h.Name, Namespace: h.Namespace, Labels: map[string]string{mcsv1beta1.LabelSourceCluster: h.ClusterID}, Annotations: h.annotations(nil)},
			Spec: coordinationv1.LeaseSpec{
				HolderIdentity:       ptr.To(h.ClusterID),
				LeaseDurationSeconds: ptr.To(seconds),
				AcquireTime:          ptr.To(metav1.NewMicroTime(now)),
				RenewTime:            ptr.To(metav1.NewMicroTime(now)),
			},
		}, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("creating broker Lease %s/%s: %w", h.Namespace, h.Name, err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading broker Lease %s/%s: %w", h.Namespace, h.Name, err)
	}
	var age time.Duration
	if h.StaleAfter > 0 {
		if lease.Spec.RenewTime != nil {
			age = now.Sub(lease.Spec.RenewTime.Time)
		}
		if lease.Spec.RenewTime != nil && age < h.StaleAfter {
			return nil
		}
	}
	lease.Annotations = h.annotations(lease.Annotations)
	lease.Spec.HolderIdentity = ptr.To(h.ClusterID)
	lease.Spec.LeaseDurationSeconds = ptr.To(seconds)
	lease.Spec.RenewTime = ptr.To(metav1.NewMicroTime(now))
	_, err = leases.Update(ctx, lease, metav1.UpdateOptions{})
	switch {
	case apierrors.IsConflict(err):
		// Another replica renewed it between the read and the write: the
		// cluster is alive, which is all the Lease says.
		return nil
	case err != nil:
		return fmt.Errorf("renewing broker Lease %s/%s: %w", h.Namespace, h.Name, err)
	}
	if h.StaleAfter > 0 && h.OnStoodIn != nil {
		h.OnStoodIn(age)
	}
	return nil
}

// annotations returns have with the version annotation set (or removed,
// when the version is unknown).
func (h *Heartbeat) annotations(have map[string]string) map[string]string {
	if h.Version == "" {
		delete(have, record.AnnotationLeaseVersion)
		return have
	}
	if have == nil {
		have = map[string]string{}
	}
	have[record.AnnotationLeaseVersion] = h.Version
	return have
}
