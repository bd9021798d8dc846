// Package quotaretry retries a write the API server refused because its
// ResourceQuota changed under the admission check. A namespace with a quota
// (a member's namespace on the broker) serialises every create on the
// quota's status; with many creates at once, and the quota controller
// recounting beside them, some are refused with a conflict on the quota
// itself, not on the object written. Retrying such a write at once costs a
// few milliseconds; failing the sync instead costs the queue's backoff and
// a failure reported on the ServiceExport.
package quotaretry

import (
	"context"
	"errors"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/wait"
)

// backoff spreads the retries over about two seconds: long enough to
// outlast a burst of creates in one namespace, short against the queue's
// own backoff.
var backoff = wait.Backoff{Duration: 10 * time.Millisecond, Factor: 1.5, Jitter: 0.5, Steps: 10}

// Write runs write until it succeeds, fails otherwise than with a quota
// conflict, the retries run out or ctx ends, and returns write's last
// error. (client-go's retry.OnError would return nil for a write that
// failed with a context error.)
func Write(ctx context.Context, write func() error) error {
	b := backoff
	for {
		err := write()
		if err == nil || !IsQuotaConflict(err) || b.Steps <= 1 {
			return err
		}
		t := time.NewTimer(b.Step())
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
	}
}

// IsQuotaConflict reports whether err is the API server's refusal of a
// write because a ResourceQuota of its namespace changed meanwhile.
func IsQuotaConflict(err error) bool {
	var status apierrors.APIStatus
	if !apierrors.IsConflict(err) || !errors.As(err, &status) {
		return false
	}
	d := status.Status().Details
	return d != nil && d.Kind == "resourcequotas"
}
