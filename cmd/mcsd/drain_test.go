package main

import (
	"context"
	"os"
	"syscall"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

func TestDrainFailsReadinessThenStopsAfterTheDelay(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	signals := make(chan os.Signal, 2)
	ctx, d := startDrain(context.Background(), clk, 10*time.Second, signals)
	check := d.readyCheck()
	if err := check.Check(nil); err != nil {
		t.Fatalf("ready before any signal: %v", err)
	}
	signals <- syscall.SIGTERM
	waitFor(t, func() bool { return check.Check(nil) != nil }, "readiness to fail at SIGTERM")
	waitFor(t, clk.HasWaiters, "the delay to start")
	clk.Step(9 * time.Second)
	if ctx.Err() != nil {
		t.Fatal("stopped before the delay was over")
	}
	clk.Step(time.Second)
	<-ctx.Done()
}

func TestDrainStopsAtOnceOnASecondSignal(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	signals := make(chan os.Signal, 2)
	ctx, _ := startDrain(context.Background(), clk, time.Hour, signals)
	signals <- syscall.SIGTERM
	waitFor(t, clk.HasWaiters, "the delay to start")
	signals <- syscall.SIGTERM
	<-ctx.Done()
}

func TestDrainWithoutDelayStopsAtTheSignal(t *testing.T) {
	signals := make(chan os.Signal, 1)
	ctx, d := startDrain(context.Background(), clocktesting.NewFakeClock(time.Now()), 0, signals)
	signals <- syscall.SIGINT
	<-ctx.Done()
	if d.readyCheck().Check(nil) == nil {
		t.Error("ready after the signal")
	}
}

// waitFor polls cond, which another goroutine makes true, for up to a
// minute.
func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("waited a minute for %s", what)
		}
	}
}
