package proxier

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	clocktesting "k8s.io/utils/clock/testing"
)

// runnerUnderTest runs a runner on a fake clock and counts its calls.
type runnerUnderTest struct {
	r     *runner
	clock *clocktesting.FakeClock
	calls atomic.Int32
}

func startRunner(t *testing.T, minInterval, maxInterval time.Duration) *runnerUnderTest {
	t.Helper()
	rt := &runnerUnderTest{clock: clocktesting.NewFakeClock(time.Unix(1000, 0))}
	rt.r = newRunner(func() error { rt.calls.Add(1); return nil }, minInterval, maxInterval, rt.clock)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { rt.r.Loop(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return rt
}

// waitCalls waits until the runner has called fn n times in all.
func (rt *runnerUnderTest) waitCalls(t *testing.T, n int32) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return rt.calls.Load() >= n, nil
	}); err != nil {
		t.Fatalf("the runner made %d calls, want %d", rt.calls.Load(), n)
	}
}

// waitWaiters waits until n timers of the runner wait on the fake clock:
// its maxInterval timer, and its pacing wait when it has one.
func (rt *runnerUnderTest) waitWaiters(t *testing.T, n int) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return rt.clock.Waiters() == n, nil
	}); err != nil {
		t.Fatalf("the runner has %d timers on its clock, want %d", rt.clock.Waiters(), n)
	}
}

func TestRunnerRunsABurstAtOnceThenPaces(t *testing.T) {
	rt := startRunner(t, time.Second, time.Hour)
	rt.waitWaiters(t, 1)

	// Two requests in a row, without the clock moving: both run at once.
	rt.r.Run()
	rt.waitCalls(t, 1)
	rt.r.Run()
	rt.waitCalls(t, 2)

	// The third waits for a token: a whole minInterval.
	rt.r.Run()
	rt.waitWaiters(t, 2)
	rt.clock.Step(999 * time.Millisecond)
	if rt.calls.Load() != 2 {
		t.Fatalf("a third sync ran before the minimum interval: %d calls", rt.calls.Load())
	}
	rt.clock.Step(time.Millisecond)
	rt.waitCalls(t, 3)
}

func TestRunnerRunsALoneChangeAtOnce(t *testing.T) {
	rt := startRunner(t, time.Second, time.Hour)
	rt.waitWaiters(t, 1)
	rt.r.Run()
	rt.waitCalls(t, 1)
	// A moment later another change: a token is left, no waiting.
	rt.clock.Step(100 * time.Millisecond)
	rt.r.Run()
	rt.waitCalls(t, 2)
}

func TestRunnerSyncsEveryMaxInterval(t *testing.T) {
	rt := startRunner(t, time.Second, 30*time.Second)
	rt.waitWaiters(t, 1)
	rt.clock.Step(30 * time.Second)
	rt.waitCalls(t, 1)
	rt.waitWaiters(t, 1)
	rt.clock.Step(30 * time.Second)
	rt.waitCalls(t, 2)
}
