package controller

import (
	"context"
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	clocktesting "k8s.io/utils/clock/testing"
)

// Many keys failing together are all retried after their own backoff, not
// paced out by a bucket shared by every key.
func TestQueueRetriesManyFailedKeysTogether(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	q := newQueue("test", clk)
	defer q.ShutDown()
	const n = 5000
	for i := range n {
		q.AddRateLimited(fmt.Sprintf("ns/svc-%d", i))
	}
	if err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return clk.HasWaiters(), nil
	}); err != nil {
		t.Fatal("the queue never waited for the retries' backoff")
	}
	clk.Step(RetryBase)
	if err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return q.Len() == n, nil
	}); err != nil {
		t.Fatalf("%d of %d failed keys are back in the queue after one backoff step", q.Len(), n)
	}
}

func TestEachKeyBacksOffOnItsOwnUpToTheMaximum(t *testing.T) {
	l := retryLimiter()
	want := RetryBase
	for k := range 12 {
		if got := l.When("ns/a"); got != want {
			t.Fatalf("failure %d of ns/a: retried after %v, want %v", k+1, got, want)
		}
		want = min(2*want, RetryMax)
	}
	if got := l.When("ns/b"); got != RetryBase {
		t.Fatalf("the first failure of another key waits %v, want %v", got, RetryBase)
	}
	l.Forget("ns/a")
	if got := l.When("ns/a"); got != RetryBase {
		t.Fatalf("after Forget, ns/a waits %v, want %v", got, RetryBase)
	}
}
