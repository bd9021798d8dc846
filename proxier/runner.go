package proxier

import (
	"context"
	"time"

	"k8s.io/utils/clock"
)

// burstSyncs is how many syncs may run back to back before minInterval
// applies: a change that arrives alone, right after a sync, is applied at
// once instead of a whole minInterval later (kube-proxy's runner allows the
// same burst).
const burstSyncs = 2

// runner calls fn when asked, at most burstSyncs times in a row and then no
// more often than once per minInterval (a token bucket), at least every
// maxInterval, and sooner than that after a failure (backing off from
// minInterval up to maxInterval while failures go on). It is kube-proxy's
// bounded-frequency runner, driven by a clock so that tests control time.
type runner struct {
	fn          func() error
	minInterval time.Duration
	maxInterval time.Duration
	clock       clock.Clock
	signal      chan struct{}
}

func newRunner(fn func() error, minInterval, maxInterval time.Duration, clk clock.Clock) *runner {
	return &runner{fn: fn, minInterval: minInterval, maxInterval: maxInterval, clock: clk, signal: make(chan struct{}, 1)}
}

// Run asks for a call of fn; requests made while one is pending are merged.
func (r *runner) Run() {
	select {
	case r.signal <- struct{}{}:
	default:
	}
}

// Loop calls fn as requested until ctx is done.
func (r *runner) Loop(ctx context.Context) {
	timer := r.clock.NewTimer(r.maxInterval)
	defer timer.Stop()
	tokens := float64(burstSyncs)
	var last time.Time // when tokens was last counted
	retry := time.Duration(0)
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C():
		case <-r.signal:
		}
		if !last.IsZero() {
			tokens = min(float64(burstSyncs), tokens+float64(r.clock.Since(last))/float64(r.minInterval))
		}
		last = r.clock.Now()
		if tokens < 1 {
			wait := time.Duration((1 - tokens) * float64(r.minInterval))
			select {
			case <-ctx.Done():
				return
			case <-r.clock.After(wait):
			}
			tokens, last = 1, r.clock.Now()
		}
		tokens--
		// This call covers any request made while waiting.
		select {
		case <-r.signal:
		default:
		}
		next := r.maxInterval
		if err := r.fn(); err != nil {
			retry = max(min(2*retry, r.maxInterval), r.minInterval, time.Second)
			next = min(retry, r.maxInterval)
		} else {
			retry = 0
		}
		if !timer.Stop() {
			select {
			case <-timer.C():
			default:
			}
		}
		timer.Reset(next)
	}
}
