package readiness

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

// script is a check that answers its observations in turn, the last one
// for ever after.
type script struct {
	seen  []Observation
	calls int
}

func (s *script) check(context.Context) (Observation, error) {
	o := s.seen[min(s.calls, len(s.seen)-1)]
	s.calls++
	return o, nil
}

// run runs stages on a fake clock, stepping it by the interval whenever
// the runner waits, until Run returns; it returns Run's error and the
// lines reported.
func run(t *testing.T, ctx context.Context, stages []Stage, heartbeat time.Duration) (error, []string) {
	t.Helper()
	clock := clocktesting.NewFakeClock(time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC))
	var lines []string
	r := Runner{Began: clock.Now(), Interval: time.Second, Heartbeat: heartbeat, Clock: clock, Report: func(l string) { lines = append(lines, l) }}
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx, stages) }()
	for {
		select {
		case err := <-done:
			return err, lines
		default:
		}
		if clock.HasWaiters() {
			clock.Step(time.Second)
		}
		runtime.Gosched()
	}
}

func TestRunnerSaysEachStageOnceInOrder(t *testing.T) {
	agent := &script{seen: []Observation{{Count: "0/2", Seen: "0 of 2 pods updated"}, {Count: "1/2", Seen: "1 of 2"}, {Done: true, Count: "2/2"}}}
	ctrl := &script{seen: []Observation{{Done: true, Count: "2/2"}}}
	err, lines := run(t, context.Background(), []Stage{
		{Name: "node agent rolled out", Check: agent.check},
		{Name: "controller rolled out", Check: ctrl.check},
	}, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"node agent rolled out 2/2 (2s)", "controller rolled out 2/2 (2s)"}
	if strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Errorf("lines:\n%s\nwant:\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
	if agent.calls != 3 || ctrl.calls != 1 {
		t.Errorf("checked the agent %d times, the controller %d; want 3 and 1", agent.calls, ctrl.calls)
	}
}

func TestRunnerTimeoutNamesTheStageAndWhatItSaw(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	never := &script{seen: []Observation{{Seen: "1 of 2 pods updated; pod a: ImagePullBackOff"}}}
	checks := 0
	stages := []Stage{
		{Name: "node agent rolled out", Check: func(ctx context.Context) (Observation, error) {
			if checks++; checks == 5 {
				cancel()
			}
			return never.check(ctx)
		}},
		{Name: "never checked", Check: func(context.Context) (Observation, error) {
			t.Error("a stage after the one that timed out was checked")
			return Observation{}, nil
		}},
	}
	err, _ := run(t, ctx, stages, 0)
	var timeout *TimeoutError
	if !errors.As(err, &timeout) || timeout.Stage != "node agent rolled out" || !strings.Contains(err.Error(), "ImagePullBackOff") {
		t.Fatalf("Run: %v, want a timeout naming the stage and the pod's trouble", err)
	}
}

// A check cut short by the end of the wait reports what the check before
// it saw, not the deadline.
func TestRunnerTimeoutKeepsWhatTheLastCompleteCheckSaw(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	calls := 0
	err, _ := run(t, ctx, []Stage{{Name: "CoreDNS answers", Check: func(ctx context.Context) (Observation, error) {
		if calls++; calls == 2 {
			cancel()
			return Observation{Seen: ctx.Err().Error()}, nil
		}
		return Observation{Seen: "0 of 2 pods answer"}, nil
	}}}, 0)
	if err == nil || !strings.Contains(err.Error(), "0 of 2 pods answer") {
		t.Fatalf("Run: %v", err)
	}
}

func TestRunnerActsOnceWhenAStageStalls(t *testing.T) {
	dns := &script{seen: []Observation{{Seen: "0 of 2 pods answer"}, {Seen: "0 of 2"}, {Seen: "0 of 2"}, {Seen: "0 of 2"}, {Seen: "0 of 2"}, {Seen: "0 of 2"}, {Seen: "0 of 2"}, {Done: true, Count: "2/2 pods"}}}
	acted := 0
	err, lines := run(t, context.Background(), []Stage{{
		Name: "CoreDNS answers for clusterset.local:", Check: dns.check,
		Stall: &Stall{After: 3 * time.Second, Do: func(context.Context) (string, error) {
			acted++
			return "restarted CoreDNS", nil
		}},
	}}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if acted != 1 {
		t.Errorf("acted %d times on the stall, want once", acted)
	}
	want := []string{"restarted CoreDNS (3s)", "CoreDNS answers for clusterset.local: 2/2 pods (7s)"}
	if strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Errorf("lines:\n%s\nwant:\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
}

func TestRunnerSaysWhatItSeesWhileWaiting(t *testing.T) {
	slow := &script{seen: []Observation{{Seen: "a"}, {Seen: "b"}, {Seen: "c"}, {Seen: "d"}, {Done: true, Count: "1/1"}}}
	err, lines := run(t, context.Background(), []Stage{{Name: "x", Check: slow.check}}, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"waiting until x: c (2s)", "x 1/1 (4s)"}
	if strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Errorf("lines:\n%s\nwant:\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
}

func TestRunnerStopsAtACheckError(t *testing.T) {
	err, _ := run(t, context.Background(), []Stage{{Name: "controller rolled out", Check: func(context.Context) (Observation, error) {
		return Observation{}, errors.New("exceeded its progress deadline")
	}}}, 0)
	if err == nil || !strings.Contains(err.Error(), "controller rolled out: exceeded") {
		t.Fatalf("Run: %v", err)
	}
}
