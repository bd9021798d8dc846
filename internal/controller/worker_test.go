package controller

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/workqueue"
)

func TestPool(t *testing.T) {
	queue := workqueue.NewTypedRateLimitingQueue(workqueue.NewTypedItemExponentialFailureRateLimiter[string](time.Millisecond, 10*time.Millisecond))
	defer queue.ShutDown()
	var mu sync.Mutex
	attempts := map[string]int{}
	var observed []error
	p := &workerPool{
		Queue: queue,
		Sync: func(_ context.Context, key string) error {
			mu.Lock()
			defer mu.Unlock()
			attempts[key]++
			if key == "ns/flaky" && attempts[key] < 3 {
				return errors.New("broker unreachable")
			}
			return nil
		},
		Observe: func(_ time.Duration, err error) {
			mu.Lock()
			defer mu.Unlock()
			observed = append(observed, err)
		},
		What: "Syncing",
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p.Run(ctx, 2)
	queue.Add("ns/ok")
	queue.Add("ns/flaky")
	err := wait.PollUntilContextTimeout(ctx, time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		return attempts["ns/flaky"] == 3 && attempts["ns/ok"] == 1, nil
	})
	if err != nil {
		t.Fatalf("attempts %v: a failed key must be retried until it succeeds, a good one synced once", attempts)
	}
	mu.Lock()
	defer mu.Unlock()
	failures := 0
	for _, e := range observed {
		if e != nil {
			failures++
		}
	}
	if len(observed) != 4 || failures != 2 {
		t.Fatalf("observed %v, want 4 syncs of which 2 failed", observed)
	}
	if n := queue.NumRequeues("ns/flaky"); n != 0 {
		t.Fatalf("a key that finally synced still has %d requeues", n)
	}
}
