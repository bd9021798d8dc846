package importer

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
// importer has seen its broker Lease change within the TTL. Ages are taken
// on this importer's own clock from the moment it saw the change, never
// from the renewTime the other cluster wrote: clocks of different clusters
// may disagree, and a skewed clock must not kill or revive a cluster.
//
// While the broker cannot be reached nothing can be observed, so the book
// is frozen at the last moment the broker answered: nobody dies for lack
// of news. When the broker answers again every cluster that was live then
// starts a fresh TTL, giving its heartbeat time to show up.
type leaseBook struct {
	clock clock.PassiveClock
	ttl   time.Duration
	local string

	mu   sync.Mutex
	seen map[string]leaseSeen
	// frozenAt is when the broker last answered before it stopped; nil
	// while it answers.
	frozenAt *time.Time
	// reported is the liveness last reported by transitions, to tell
	// changes apart.
	reported map[string]bool
}

// leaseSeen is the last version of a cluster's Lease this importer saw and
// when, on its own clock.
type leaseSeen struct {
	version  leaseVersion
	observed time.Time
}

func newLeaseBook(clk clock.PassiveClock, ttl time.Duration, local string) *leaseBook {
	return &leaseBook{clock: clk, ttl: ttl, local: local, seen: map[string]leaseSeen{}, reported: map[string]bool{}}
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
	b.seen[cluster] = leaseSeen{version: v, observed: b.clock.Now()}
	return true
}

// forget drops a cluster whose Lease was deleted: it left the clusterset,
// or was removed from it.
func (b *leaseBook) forget(cluster string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.seen, cluster)
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

// thaw lets time run again after the broker answered: every cluster that
// was live when it stopped answering starts a fresh TTL now. A cluster that
// was already dead stays dead until its Lease changes.
func (b *leaseBook) thaw() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.frozenAt == nil {
		return
	}
	now := b.clock.Now()
	for cluster, s := range b.seen {
		if b.liveLocked(cluster) {
			s.observed = now
			b.seen[cluster] = s
		}
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
