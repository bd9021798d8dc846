package controller

import (
	"time"

	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
)

// Backoff of a key whose sync failed: from RetryBase, doubling, up to
// RetryMax. There is no overall bucket: after a broker outage thousands of
// keys may fail together, and a shared bucket (client-go's default is 10/s)
// would hold the last of them back for minutes; each key's own backoff and
// the clients' rate limits are what pace them.
const (
	RetryBase = 200 * time.Millisecond
	RetryMax  = 10 * time.Second
)

// newQueue returns the workqueue of a controller named name, with the
// per-key backoff above; clk nil means the real clock.
func newQueue(name string, clk clock.WithTicker) workqueue.TypedRateLimitingInterface[string] {
	cfg := workqueue.TypedRateLimitingQueueConfig[string]{Name: name}
	if clk != nil {
		cfg.Clock = clk
	}
	return workqueue.NewTypedRateLimitingQueueWithConfig(retryLimiter(), cfg)
}

func retryLimiter() workqueue.TypedRateLimiter[string] {
	return workqueue.NewTypedItemExponentialFailureRateLimiter[string](RetryBase, RetryMax)
}
