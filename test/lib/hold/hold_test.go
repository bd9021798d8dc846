package hold

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestForChecksUntilTheHoldEnds(t *testing.T) {
	calls := 0
	err := For(context.Background(), 50*time.Millisecond, 5*time.Millisecond, func(context.Context) error {
		calls++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if calls < 2 {
		t.Fatalf("checked %d times in a 50 ms hold with a 5 ms interval", calls)
	}
}

func TestForStopsAtTheFirstFailure(t *testing.T) {
	calls := 0
	err := For(context.Background(), time.Hour, time.Millisecond, func(context.Context) error {
		calls++
		if calls == 3 {
			return errors.New("it came back")
		}
		return nil
	})
	if err == nil || !strings.Contains(err.Error(), "it came back") || !strings.Contains(err.Error(), "into a hold of 1h0m0s") {
		t.Fatalf("err = %v, want the check's error and where in the hold it came", err)
	}
	if calls != 3 {
		t.Fatalf("checked %d times, want 3", calls)
	}
}

func TestForEndsWithItsContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := For(ctx, time.Hour, time.Millisecond, func(context.Context) error { return nil }); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
}
