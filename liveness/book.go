package liveness

import (
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/utils/clock"

	"github.com/mcsd-io/mcsd/internal/record"
)

// leaseBook decides which clusters are live. A cluster is live while this
// controller has seen its broker Lease change within the TTL. Ages are taken
// on this controller's own clock from the moment it saw the change, never
// from the renewTime the other cluster wrote: clocks of different clusters
// may disagree, and a skewed clock must not kill or revive a cluster.
//
// The first sight of a Lease (after this controller starts, or takes over
// from another replica) is no renewal: the cluster is live then only if the
// renewTime it wrote, plus the TTL and the clock skew allowed between
// clusters, is still ahead of this controller's clock. Otherwise it stays dead
// until its Lease changes, so a cluster that died before a restart does not
// come back for a TTL.
//
// A cluster dead for longer than the grace (or without any Lease since this
// controller started that long ago) is gone for good as far as the merge is
// concerned: its records stop pinning the services' spec and VIPs (see
// pinned) until it renews again.
//
// While the broker cannot be reached nothing can be observed, so the book
// is frozen at the last moment the broker answered: nobody dies for lack
// of news. When the broker answers again, the time it did not answer is
// not counted against a live cluster: each has the TTL it had left when
// the book froze. Not a fresh TTL: a broker that keeps timing out under
// load would otherwise keep a dead cluster alive for ever.
type leaseBook struct {
	clock clock.PassiveClock
	ttl   time.Duration
	local string
	// skew is how far another cluster's clock may be behind this one's
	// for its renewTime to count on first sight.
	skew time.Duration
	// grace is how long a dead cluster's records still count in merges.
	grace time.Duration

	mu   sync.Mutex
	seen map[string]leaseSeen
	// started is when the controller started: clusters without a Lease are
	// dead since then.
	started time.Time
	// goneSince holds, for clusters whose Lease was deleted, when they
	// died.
	goneSince map[string]time.Time
	// pinnedReported is the pinning last reported by pinTransition.
	pinnedReported map[string]bool
	// frozenAt is when the broker last answered before it stopped; nil
	// while it answers.
	frozenAt *time.Time
	// reported is the liveness last reported by transitions, to tell
	// changes apart.
	reported map[string]bool
}

// leaseSeen is the last version of a cluster's Lease this controller saw and
// when, on its own clock.
type leaseSeen struct {
	version  leaseVersion
	observed time.Time
	// backdated: observed is the renewal the Lease said it made (first
	// sight), not when this controller saw one.
	backdated bool
}

func newLeaseBook(clk clock.PassiveClock, ttl time.Duration, local string) *leaseBook {
	return &leaseBook{
		clock: clk, ttl: ttl, local: local, skew: DefaultClockSkew, grace: DefaultGrace,
		started: clk.Now(), seen: map[string]leaseSeen{}, goneSince: map[string]time.Time{},
		reported: map[string]bool{}, pinnedReported: map[string]bool{},
	}
}

// start sets the moment the controller started: a cluster with no Lease at
// all has been dead since then.
func (b *leaseBook) start(at time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.started = at
}

// leaseVersion is one version of a cluster's Lease as the book compares
// them: renew is what changes when the cluster renews it (the renewTime it
// wrote, or, for a Lease without one, its resourceVersion), and revision
// orders the versions of the Lease (its resourceVersion as a number; 0 when
// it is not one).
type leaseVersion struct {
	renew    string
	revision uint64
	// renewed is the renewTime, zero when there is none.
	renewed time.Time
}

func versionOf(l *coordinationv1.Lease) leaseVersion {
	v := leaseVersion{renew: "rv:" + l.ResourceVersion}
	if l.Spec.RenewTime != nil {
		v.renew = l.Spec.RenewTime.UTC().Format(time.RFC3339Nano)
		v.renewed = l.Spec.RenewTime.Time
	}
	// An etcd-backed API server's resourceVersions are its revisions,
	// increasing with every write. The book hears of a Lease from two
	// sources (the informer's watch and the probe's list) that may deliver
	// versions out of order; the revision tells an old one from a renewal.
	v.revision, _ = strconv.ParseUint(l.ResourceVersion, 10, 64)
	return v
}

// leaseCluster returns the cluster a broker Lease is the heartbeat of, and
// false for any other Lease in the broker namespace.
func leaseCluster(l *coordinationv1.Lease) (string, bool) {
	cluster := l.Labels[record.LabelSourceCluster]
	if cluster == "" || l.Name != record.LeaseName(cluster) {
		return "", false
	}
	return cluster, true
}

// observe records a version of cluster's Lease. It returns true for a
// renewal: a version newer than the last one seen (by revision, when both
// have one) that renews it. A version older than the last one seen, which
// a lagging watch may still deliver, changes nothing, unless the cluster's
// own renewTime in it is later than the last one seen: a broker restored
// from a backup starts its revisions over.
func (b *leaseBook) observe(cluster string, v leaseVersion) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	s, ok := b.seen[cluster]
	if ok && v.revision != 0 && s.version.revision != 0 && v.revision <= s.version.revision &&
		(v.renewed.IsZero() || !v.renewed.After(s.version.renewed)) {
		return false
	}
	if ok && s.version.renew == v.renew {
		// A write that did not renew it (its labels, say).
		s.version = v
		b.seen[cluster] = s
		return false
	}
	now := b.clock.Now()
	observed, backdated := now, false
	if !ok && !v.renewed.IsZero() {
		// First sight: not a renewal witnessed here. The cluster counts as
		// renewed when it says it renewed, allowing its clock to be skew
		// behind ours (a clock ahead of ours is taken as now): a Lease
		// renewed long ago is dead at once, and stays so until it changes.
		if at := v.renewed.Add(b.skew); at.Before(now) {
			observed, backdated = at, true
		}
	}
	delete(b.goneSince, cluster)
	b.seen[cluster] = leaseSeen{version: v, observed: observed, backdated: backdated}
	return true
}

// forget drops a cluster whose Lease was deleted: it left the clusterset,
// or was removed from it.
func (b *leaseBook) forget(cluster string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.seen[cluster]; ok {
		// Dead when its TTL ran out, or now if it was still live.
		gone := b.deadSinceLocked(cluster)
		if now := b.clock.Now(); gone.After(now) {
			gone = now
		}
		b.goneSince[cluster] = gone
	}
	delete(b.seen, cluster)
}

// now is the moment liveness is judged at: the clock's, or the moment the
// broker last answered while the book is frozen.
func (b *leaseBook) nowLocked() time.Time {
	if b.frozenAt != nil {
		return *b.frozenAt
	}
	return b.clock.Now()
}

// deadSinceLocked is when a cluster that is not live died: its last
// renewal's TTL ran out, its Lease was deleted, or, with no Lease ever
// seen, the controller started.
func (b *leaseBook) deadSinceLocked(cluster string) time.Time {
	if s, ok := b.seen[cluster]; ok {
		return s.observed.Add(b.ttl)
	}
	if at, ok := b.goneSince[cluster]; ok {
		return at
	}
	return b.started
}

// pinned reports whether cluster's records count in merges: it is live, or
// dead for less than the grace.
func (b *leaseBook) pinned(cluster string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.pinnedLocked(cluster)
}

func (b *leaseBook) pinnedLocked(cluster string) bool {
	if b.liveLocked(cluster) {
		return true
	}
	return b.nowLocked().Sub(b.deadSinceLocked(cluster)) < b.grace
}

// pinTransition reevaluates whether cluster's records count, and reports
// whether that changed since the last call for it (the first call reports
// a change only when they do not count).
func (b *leaseBook) pinTransition(cluster string) (pinned, changed bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	pinned = b.pinnedLocked(cluster)
	prev, known := b.pinnedReported[cluster]
	b.pinnedReported[cluster] = pinned
	if !known {
		return pinned, !pinned
	}
	return pinned, pinned != prev
}

// nextChange returns how long until cluster's liveness or pinning next
// changes without a renewal: its TTL running out while live, the grace
// running out while dead. False when nothing is due: this cluster, a
// frozen book, or a cluster past its grace.
func (b *leaseBook) nextChange(cluster string) (time.Duration, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if cluster == b.local || b.frozenAt != nil {
		return 0, false
	}
	now := b.clock.Now()
	if b.liveLocked(cluster) {
		return b.seen[cluster].observed.Add(b.ttl).Sub(now), true
	}
	if end := b.deadSinceLocked(cluster).Add(b.grace); end.After(now) {
		return end.Sub(now), true
	}
	return 0, false
}

// live reports whether cluster's endpoints belong to its services.
func (b *leaseBook) live(cluster string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.liveLocked(cluster)
}

func (b *leaseBook) liveLocked(cluster string) bool {
	if cluster == b.local {
		return true
	}
	s, ok := b.seen[cluster]
	if !ok {
		return false
	}
	at := b.clock.Now()
	if b.frozenAt != nil {
		at = *b.frozenAt
	}
	return at.Sub(s.observed) < b.ttl
}

// expiresIn returns how long cluster stays live without another renewal,
// and false when it is not live, is this cluster, or the book is frozen
// (nothing expires then).
func (b *leaseBook) expiresIn(cluster string) (time.Duration, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if cluster == b.local || b.frozenAt != nil || !b.liveLocked(cluster) {
		return 0, false
	}
	return b.seen[cluster].observed.Add(b.ttl).Sub(b.clock.Now()), true
}

// transition reevaluates cluster and reports whether its liveness changed
// since the last call for it, and whether there was one (known).
func (b *leaseBook) transition(cluster string) (live, changed, known bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	live = b.liveLocked(cluster)
	prev, known := b.reported[cluster]
	b.reported[cluster] = live
	return live, live != prev || !known, known
}

// decided returns the liveness last decided by transition for every
// cluster it was asked about.
func (b *leaseBook) decided() map[string]bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return maps.Clone(b.reported)
}

// freeze stops time for liveness at lastContact, the last moment the broker
// answered. Freezing a frozen book keeps the first moment.
func (b *leaseBook) freeze(lastContact time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.frozenAt == nil {
		b.frozenAt = &lastContact
	}
}

// thaw lets time run again after the broker answered, as if it had stood
// still while the broker did not: the last renewal of every cluster that
// was live when the book froze moves forward by the outage, and one seen
// during the outage counts from now. A Lease first seen during the outage
// counts from the renewal it says it made: however long the outage, a
// cluster that renewed long ago is dead. The caller has just listed the
// Leases, so a cluster that renewed during the outage has been seen to.
func (b *leaseBook) thaw() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.frozenAt == nil {
		return
	}
	now, frozenAt := b.clock.Now(), *b.frozenAt
	for cluster, s := range b.seen {
		switch {
		case !s.observed.After(frozenAt) && b.liveLocked(cluster):
			s.observed = s.observed.Add(now.Sub(frozenAt))
		case s.observed.After(frozenAt) && !s.backdated:
			s.observed = now
		default:
			continue
		}
		b.seen[cluster] = s
	}
	b.frozenAt = nil
}

// frozen reports whether the book is frozen, and since when.
func (b *leaseBook) frozen() (time.Time, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.frozenAt == nil {
		return time.Time{}, false
	}
	return *b.frozenAt, true
}

// clusters returns every cluster the book knows of, sorted: those with a
// Lease and those it reported on.
func (b *leaseBook) clusters() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	for c := range b.seen {
		out = append(out, c)
	}
	for c := range b.reported {
		if _, ok := b.seen[c]; !ok {
			out = append(out, c)
		}
	}
	slices.Sort(out)
	return out
}

// liveCount is the number of live clusters the book knows of, this one
// included.
func (b *leaseBook) liveCount() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	localSeen := false
	for c := range b.seen {
		if c == b.local {
			localSeen = true
		}
		if b.liveLocked(c) {
			n++
		}
	}
	if !localSeen {
		n++
	}
	return n
}
