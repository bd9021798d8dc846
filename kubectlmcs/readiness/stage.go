// Package readiness waits, stage by stage, until a member that kubectl mcs
// join set up works: mcsd's node agents and controller rolled out, and
// every pod of the cluster DNS answering for clusterset.local, asked
// directly. A Runner polls each stage's check until it is done and says so
// in one line; on timeout its error names the stage and what the check saw
// last. It reads the member, and changes it only where a stage is told to
// act when it stalls (restarting CoreDNS).
package readiness

import (
	"context"
	"fmt"
	"time"

	"k8s.io/utils/clock"
)

// Observation is what one check of a stage saw.
type Observation struct {
	// Done says the stage is reached.
	Done bool
	// Count is how far it got, such as "2/2" or "3/3 pods": said with the
	// stage's name once done.
	Count string
	// Seen says what is missing while not done: what a timeout reports.
	Seen string
}

// Stage is one condition to wait for.
type Stage struct {
	// Name says what holds once the stage is done ("node agent rolled
	// out").
	Name string
	// Check observes the member once. An error ends the wait: something
	// waiting will not mend (a rollout past its progress deadline); what
	// may pass (an API error, a pod not ready yet) is an Observation.
	Check func(ctx context.Context) (Observation, error)
	// Stall, when set, acts once when the stage is not done Stall.After
	// after it began.
	Stall *Stall
}

// Stall is what to do about a stage that takes too long.
type Stall struct {
	After time.Duration
	// Do acts and says what it did, for the progress line.
	Do func(ctx context.Context) (string, error)
}

// Runner runs stages in order.
type Runner struct {
	// Began is when the work being waited for began: progress lines and
	// errors say how long after it.
	Began time.Time
	// Interval is the time between two checks of a stage.
	Interval time.Duration
	// Heartbeat, when not zero, is how often a stage not done yet says
	// what it sees.
	Heartbeat time.Duration
	Clock     clock.Clock
	// Report is told each line of progress.
	Report func(line string)
}

// TimeoutError is a wait that ended before a stage was done.
type TimeoutError struct {
	// Stage is the name of the stage waited for, Seen what its check saw
	// last, After how long after Began.
	Stage, Seen string
	After       time.Duration
}

func (e *TimeoutError) Error() string {
	return fmt.Sprintf("gave up %v after join began, waiting until %s: %s", e.After.Round(100*time.Millisecond), e.Stage, e.Seen)
}

// Run checks each stage until it is done, in order, until ctx ends.
func (r Runner) Run(ctx context.Context, stages []Stage) error {
	for _, s := range stages {
		if err := r.run(ctx, s); err != nil {
			return err
		}
	}
	return nil
}

func (r Runner) run(ctx context.Context, s Stage) error {
	began := r.Clock.Now()
	lastBeat := began
	stalled := false
	seen := "not checked yet"
	for {
		o, err := s.Check(ctx)
		if ctx.Err() != nil && !o.Done {
			// What a check cut short saw is the deadline, not the member.
			return &TimeoutError{Stage: s.Name, Seen: seen, After: r.Clock.Since(r.Began)}
		}
		if err != nil {
			return fmt.Errorf("%s: %w", s.Name, err)
		}
		if o.Done {
			r.Report(fmt.Sprintf("%s %s (%s)", s.Name, o.Count, r.since()))
			return nil
		}
		seen = o.Seen
		if s.Stall != nil && !stalled && r.Clock.Since(began) >= s.Stall.After {
			stalled = true
			what, err := s.Stall.Do(ctx)
			if err != nil {
				return fmt.Errorf("%s: %w", s.Name, err)
			}
			r.Report(fmt.Sprintf("%s (%s)", what, r.since()))
		}
		if r.Heartbeat > 0 && r.Clock.Since(lastBeat) >= r.Heartbeat {
			lastBeat = r.Clock.Now()
			r.Report(fmt.Sprintf("waiting until %s: %s (%s)", s.Name, o.Seen, r.since()))
		}
		select {
		case <-ctx.Done():
			return &TimeoutError{Stage: s.Name, Seen: seen, After: r.Clock.Since(r.Began)}
		case <-r.Clock.After(r.Interval):
		}
	}
}

// since is how long after Began it is, as progress lines say it.
func (r Runner) since() string {
	return r.Clock.Since(r.Began).Round(100 * time.Millisecond).String()
}
