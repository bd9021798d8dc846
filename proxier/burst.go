package proxier

import "sync"

// burstHold lets a caller that hands over many changes at once ask for one
// sync after the last of them. A cluster that goes or comes back is one
// slice update per service (Feed.SetGoneClusters): without the hold, the
// first update starts a sync at once that carries only itself, the next
// takes the second of the runner's burst, and the rest wait MinSyncPeriod
// for a token, a second added to every cluster's departure.
type burstHold struct {
	mu      sync.Mutex
	holders int
	asked   bool
}

func (b *burstHold) hold() {
	b.mu.Lock()
	b.holders++
	b.mu.Unlock()
}

// release ends one hold and reports whether a sync was asked for while the
// last one lasted.
func (b *burstHold) release() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.holders--
	if b.holders > 0 || !b.asked {
		return false
	}
	b.asked = false
	return true
}

// postpone reports whether a sync asked for now must wait for the hold's end,
// and notes that one was.
func (b *burstHold) postpone() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.holders == 0 {
		return false
	}
	b.asked = true
	return true
}

// syncHolder is a Provider that can apply a burst of changes in one sync:
// the syncs its handlers ask for between holdSyncs and the call of the
// release it returns are one sync, asked for by release.
type syncHolder interface {
	holdSyncs() (release func())
}

var (
	_ syncHolder = (*Proxier)(nil)
	_ syncHolder = (*DualStack)(nil)
)

func (p *Proxier) holdSyncs() func() {
	p.burst.hold()
	return func() {
		if p.burst.release() {
			p.Sync()
		}
	}
}

func (d *DualStack) holdSyncs() func() {
	r4, r6 := d.ipv4.holdSyncs(), d.ipv6.holdSyncs()
	return func() { r4(); r6() }
}
