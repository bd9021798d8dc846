// Package hold checks, in tests, that a state lasts. A test first waits for
// a positive sync point (the thing it expects has happened somewhere), then
// hold.For asks again and again, for a stated time, that nothing it must not
// see happens. It is the negative counterpart of polling until a condition
// holds; it is never a way to wait for something to happen.
package hold

import (
	"context"
	"fmt"
	"time"
)

// For calls check at once and then every interval until d has passed, and
// returns the first error check returns, saying how far into the hold it
// came. It returns ctx's error if ctx ends first.
func For(ctx context.Context, d, every time.Duration, check func(ctx context.Context) error) error {
	began := time.Now()
	ticker := time.NewTicker(every)
	defer ticker.Stop()
	for {
		if err := check(ctx); err != nil {
			return fmt.Errorf("%v into a hold of %v: %w", time.Since(began).Round(time.Millisecond), d, err)
		}
		if time.Since(began) >= d {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%v into a hold of %v: %w", time.Since(began).Round(time.Millisecond), d, ctx.Err())
		case <-ticker.C:
		}
	}
}
