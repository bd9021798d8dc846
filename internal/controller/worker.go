// The worker pool runs the workers of mcsd's controllers in the manner of
// client-go's sample-controller: each takes a namespace/name key from a
// rate-limited workqueue, syncs it, and on failure puts it back with the
// queue's backoff. It knows nothing of what a sync does.

package controller

import (
	"context"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// workerPool is a number of workers draining one queue.
type workerPool struct {
	Queue workqueue.TypedRateLimitingInterface[string]
	// Sync makes the world match the desired state of one key.
	Sync func(ctx context.Context, key string) error
	// Observe, when set, is told how long each sync took and how it ended.
	Observe func(d time.Duration, err error)
	// What is logged for a failed sync, such as "Importing service".
	What  string
	Clock clock.PassiveClock
}

// Run starts n workers and returns at once; they stop when ctx ends or the
// queue shuts down.
func (p *workerPool) Run(ctx context.Context, n int) {
	if p.Clock == nil {
		p.Clock = clock.RealClock{}
	}
	for range n {
		go wait.UntilWithContext(ctx, func(ctx context.Context) {
			for p.processNext(ctx) {
			}
		}, time.Second)
	}
}

func (p *workerPool) processNext(ctx context.Context) bool {
	key, quit := p.Queue.Get()
	if quit {
		return false
	}
	defer p.Queue.Done(key)
	start := p.Clock.Now()
	err := p.Sync(ctx, key)
	if p.Observe != nil {
		p.Observe(p.Clock.Since(start), err)
	}
	if err == nil {
		p.Queue.Forget(key)
		return true
	}
	logger := klog.FromContext(ctx)
	if apierrors.IsConflict(err) {
		// A write raced the cache's view of the object; the retry reads
		// the newer one.
		logger.V(4).Info(p.What+" raced a change; retrying", "key", key, "err", err)
	} else {
		logger.Error(err, p.What+" failed; retrying", "key", key, "retries", p.Queue.NumRequeues(key))
	}
	p.Queue.AddRateLimited(key)
	return true
}
