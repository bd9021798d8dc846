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
	"k8s.io/client-go/util/retry"
)

// backoff spreads the retries over about two seconds: long enough to
// outlast a burst of creates in one namespace, short against the queue's
// own backoff.
var backoff = wait.Backoff{Duration: 10 * time.Millisecond, Factor: 1.5, Jitter: 0.5, Steps: 10}

// Write runs write until it succeeds, fails otherwise than with a quota
// conflict, the retries run out or ctx ends.
func Write(ctx context.Context, write func() error) error {
	return retry.OnError(backoff, func(err error) bool { return ctx.Err() == nil && IsQuotaConflict(err) }, write)
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
