package liveness

import (
	"testing"
	"time"

	testingclock "k8s.io/utils/clock/testing"
)

const ttl = 6 * time.Second

func newBook(t *testing.T) (*leaseBook, *testingclock.FakeClock) {
	t.Helper()
	clk := testingclock.NewFakeClock(time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC))
	return newLeaseBook(clk, ttl, "home"), clk
}

func expectLive(t *testing.T, b *leaseBook, cluster string, want bool) {
	t.Helper()
	if got := b.live(cluster); got != want {
		t.Fatalf("live(%s) = %v, want %v", cluster, got, want)
	}
}

func TestLeaseBook(t *testing.T) {
	t.Run("a cluster is live for the TTL after its Lease was seen to change, on the importer's clock", func(t *testing.T) {
		b, clk := newBook(t)
		expectLive(t, b, "east", false)
		// The renewTime the other cluster wrote is an opaque version: a
		// clock an hour off there changes nothing here.
		if !b.observe("east", renewal("2026-11-22T11:00:00Z")) {
			t.Fatal("the first observation is a change")
		}
		expectLive(t, b, "east", true)
		clk.Step(ttl - time.Millisecond)
		expectLive(t, b, "east", true)
		if d, ok := b.expiresIn("east"); !ok || d != time.Millisecond {
			t.Fatalf("expiresIn = %v, %v; want 1ms, true", d, ok)
		}
		clk.Step(time.Millisecond)
		expectLive(t, b, "east", false)
		if _, ok := b.expiresIn("east"); ok {
			t.Fatal("a dead cluster has no expiry")
		}
	})

	t.Run("seeing the same Lease version again is not a renewal", func(t *testing.T) {
		b, clk := newBook(t)
		b.observe("east", renewal("v1"))
		clk.Step(ttl / 2)
		if b.observe("east", renewal("v1")) {
			t.Fatal("an unchanged version counted as a renewal")
		}
		clk.Step(ttl / 2)
		expectLive(t, b, "east", false)
		if !b.observe("east", renewal("v2")) {
			t.Fatal("a new version is a renewal")
		}
		expectLive(t, b, "east", true)
	})

	t.Run("this cluster is always live, Lease or not", func(t *testing.T) {
		b, clk := newBook(t)
		expectLive(t, b, "home", true)
		b.observe("home", renewal("v1"))
		clk.Step(10 * ttl)
		expectLive(t, b, "home", true)
		if _, ok := b.expiresIn("home"); ok {
			t.Fatal("this cluster never expires")
		}
	})

	t.Run("a deleted Lease kills its cluster at once", func(t *testing.T) {
		b, _ := newBook(t)
		b.observe("east", renewal("v1"))
		b.forget("east")
		expectLive(t, b, "east", false)
	})

	t.Run("while the broker is unreachable nobody dies, and on its return live clusters have the TTL they had left", func(t *testing.T) {
		b, clk := newBook(t)
		b.observe("east", renewal("v1"))
		b.observe("west", renewal("v1"))
		clk.Step(ttl + time.Second)
		b.observe("west", renewal("v2")) // east is dead before the outage, west is not
		expectLive(t, b, "east", false)
		clk.Step(2 * time.Second)
		lastContact := clk.Now()
		clk.Step(2 * time.Second)
		b.freeze(lastContact)
		clk.Step(30 * time.Second)
		b.freeze(clk.Now()) // a later failure keeps the first moment
		if at, ok := b.frozen(); !ok || !at.Equal(lastContact) {
			t.Fatalf("frozen() = %v, %v; want %v", at, ok, lastContact)
		}
		expectLive(t, b, "west", true)
		expectLive(t, b, "east", false)
		if _, ok := b.expiresIn("west"); ok {
			t.Fatal("nothing expires while frozen")
		}

		b.thaw()
		expectLive(t, b, "west", true)
		expectLive(t, b, "east", false)
		// 2 s of west's TTL had passed when the broker last answered.
		left := ttl - 2*time.Second
		if got, ok := b.expiresIn("west"); !ok || got != left {
			t.Fatalf("west expires in %v, %v after the outage; want %v", got, ok, left)
		}
		clk.Step(left - time.Millisecond)
		expectLive(t, b, "west", true)
		clk.Step(time.Millisecond)
		expectLive(t, b, "west", false)
	})

	t.Run("a cluster that dies during the outage is dropped once the TTL it had left runs out after the broker returns", func(t *testing.T) {
		b, clk := newBook(t)
		b.observe("east", renewal("v1"))
		clk.Step(time.Second)
		b.freeze(clk.Now())
		clk.Step(time.Minute)
		b.thaw()
		clk.Step(ttl - time.Second - time.Millisecond)
		expectLive(t, b, "east", true)
		clk.Step(time.Millisecond)
		expectLive(t, b, "east", false)
	})

	t.Run("a renewal seen during the outage counts from the broker's return", func(t *testing.T) {
		b, clk := newBook(t)
		b.observe("east", renewal("v1"))
		b.freeze(clk.Now())
		clk.Step(ttl / 2)
		b.observe("east", renewal("v2"))
		clk.Step(time.Minute)
		b.thaw()
		if got, ok := b.expiresIn("east"); !ok || got != ttl {
			t.Fatalf("east expires in %v, %v; want a whole TTL, %v", got, ok, ttl)
		}
	})

	t.Run("a cluster first seen during the outage with an old renewal stays dead after it", func(t *testing.T) {
		b, clk := newBook(t)
		b.freeze(clk.Now())
		clk.Step(time.Hour)
		b.observe("east", at(clk.Now().Add(-30*time.Minute)))
		b.thaw()
		expectLive(t, b, "east", false)
	})

	t.Run("a broker that keeps timing out does not keep a dead cluster alive", func(t *testing.T) {
		// Outages of a third of the TTL, a third of the TTL apart: with a
		// fresh TTL at every return east would never die.
		b, clk := newBook(t)
		b.observe("east", renewal("v1"))
		for range 6 {
			clk.Step(ttl / 3)
			b.freeze(clk.Now())
			clk.Step(ttl / 3)
			b.thaw()
		}
		expectLive(t, b, "east", false)
	})

	t.Run("transitions are reported once per change", func(t *testing.T) {
		b, clk := newBook(t)
		b.observe("east", renewal("v1"))
		if live, changed, known := b.transition("east"); !live || !changed || known {
			t.Fatalf("first evaluation: live %v changed %v known %v", live, changed, known)
		}
		if _, changed, _ := b.transition("east"); changed {
			t.Fatal("no change reported twice")
		}
		clk.Step(ttl)
		if live, changed, known := b.transition("east"); live || !changed || !known {
			t.Fatalf("after the TTL: live %v changed %v known %v", live, changed, known)
		}
		if d := b.decided(); len(d) != 1 || d["east"] {
			t.Fatalf("decided %v after the TTL, want east gone", d)
		}
		b.observe("east", renewal("v2"))
		if live, changed, _ := b.transition("east"); !live || !changed {
			t.Fatalf("after renewing: live %v changed %v", live, changed)
		}
		if d := b.decided(); !d["east"] {
			t.Fatalf("decided %v after renewing, want east live", d)
		}
	})

	t.Run("the live count includes this cluster", func(t *testing.T) {
		b, clk := newBook(t)
		b.observe("east", renewal("v1"))
		b.observe("west", renewal("v1"))
		if n := b.liveCount(); n != 3 {
			t.Fatalf("liveCount = %d, want 3", n)
		}
		clk.Step(ttl)
		if n := b.liveCount(); n != 1 {
			t.Fatalf("liveCount = %d, want 1", n)
		}
	})
}

// renewal is a version of a Lease without a revision: only its renewTime
// tells renewals apart.
func renewal(renew string) leaseVersion { return leaseVersion{renew: renew} }

func TestLeaseVersionsDeliveredOutOfOrderAreNoRenewal(t *testing.T) {
	b, clk := newBook(t)
	if !b.observe("east", leaseVersion{renew: "t5", revision: 5}) {
		t.Fatal("the first version seen is not a renewal")
	}
	clk.Step(ttl - time.Second)
	// A lagging watch delivers an older version after the probe saw the
	// newer one: the cluster did not renew.
	if b.observe("east", leaseVersion{renew: "t4", revision: 4}) {
		t.Fatal("an older version counted as a renewal")
	}
	if b.observe("east", leaseVersion{renew: "t5", revision: 5}) {
		t.Fatal("the same version counted as a renewal")
	}
	clk.Step(time.Second)
	expectLive(t, b, "east", false)
	// A write that does not renew (a label edit) is no renewal either.
	if b.observe("east", leaseVersion{renew: "t5", revision: 6}) {
		t.Fatal("a write without a new renewTime counted as a renewal")
	}
	if !b.observe("east", leaseVersion{renew: "t7", revision: 7}) {
		t.Fatal("a newer renewal was not one")
	}
	expectLive(t, b, "east", true)
}

func TestARenewalAfterTheBrokerWasRestoredFromABackupCounts(t *testing.T) {
	b, clk := newBook(t)
	at := time.Date(2026, 11, 26, 9, 0, 0, 0, time.UTC)
	b.observe("east", leaseVersion{renew: "a", revision: 900, renewed: at})
	clk.Step(ttl - time.Second)
	// The restored broker's revisions are lower, the cluster's renewTime later.
	if !b.observe("east", leaseVersion{renew: "b", revision: 40, renewed: at.Add(ttl)}) {
		t.Fatal("a later renewTime at a lower revision was no renewal")
	}
	// An old version at a lower revision is still none.
	if b.observe("east", leaseVersion{renew: "c", revision: 30, renewed: at.Add(time.Second)}) {
		t.Fatal("an older renewTime at a lower revision counted")
	}
}

// at is a version of a Lease renewed at t by the other cluster's clock.
func at(t time.Time) leaseVersion {
	return leaseVersion{renew: t.UTC().Format(time.RFC3339Nano), renewed: t}
}

func TestALeaseSeenFirstIsJudgedByItsRenewTime(t *testing.T) {
	t.Run("a Lease renewed long before the importer started is dead until it renews", func(t *testing.T) {
		b, clk := newBook(t)
		b.observe("east", at(clk.Now().Add(-time.Hour)))
		expectLive(t, b, "east", false)
		if live, changed, _ := b.transition("east"); live || !changed {
			t.Fatalf("first evaluation: live %v changed %v; want dead", live, changed)
		}
		clk.Step(time.Second)
		if !b.observe("east", at(clk.Now())) {
			t.Fatal("its next renewal is one")
		}
		expectLive(t, b, "east", true)
	})
	t.Run("a Lease renewed just before is live for what is left of its TTL and the allowed skew", func(t *testing.T) {
		b, clk := newBook(t)
		renewed := clk.Now().Add(-ttl/2 - b.skew)
		b.observe("east", at(renewed))
		expectLive(t, b, "east", true)
		d, ok := b.expiresIn("east")
		if want := ttl / 2; !ok || d != want {
			t.Fatalf("expiresIn = %v, %v; want %v", d, ok, want)
		}
		clk.Step(d)
		expectLive(t, b, "east", false)
	})
	t.Run("a clock behind ours by less than the allowed skew does not kill a live cluster", func(t *testing.T) {
		b, clk := newBook(t)
		// Renewed just now, by a clock ttl+skew/2 behind.
		b.observe("east", at(clk.Now().Add(-ttl-b.skew/2)))
		expectLive(t, b, "east", true)
	})
	t.Run("a clock ahead of ours counts as renewed now, not later", func(t *testing.T) {
		b, clk := newBook(t)
		b.observe("east", at(clk.Now().Add(time.Hour)))
		if d, ok := b.expiresIn("east"); !ok || d != ttl {
			t.Fatalf("expiresIn = %v, %v; want the TTL", d, ok)
		}
	})
	t.Run("a renewal seen later is timed on the importer's clock whatever its renewTime", func(t *testing.T) {
		b, clk := newBook(t)
		b.observe("east", at(clk.Now()))
		clk.Step(ttl - time.Second)
		b.observe("east", at(clk.Now().Add(-time.Hour)))
		if d, ok := b.expiresIn("east"); !ok || d != ttl {
			t.Fatalf("expiresIn = %v, %v; want the TTL", d, ok)
		}
	})
}

func TestRecordsOfClustersGonePastTheGraceStopCounting(t *testing.T) {
	const grace = time.Minute
	newGraceBook := func(t *testing.T) (*leaseBook, *testingclock.FakeClock) {
		b, clk := newBook(t)
		b.grace = grace
		b.start(clk.Now())
		return b, clk
	}
	t.Run("a dead cluster counts for the grace after its TTL ran out, then not until it renews", func(t *testing.T) {
		b, clk := newGraceBook(t)
		b.observe("east", at(clk.Now()))
		if _, changed := b.pinTransition("east"); changed {
			t.Fatal("a live cluster's first evaluation is no change")
		}
		clk.Step(ttl)
		expectLive(t, b, "east", false)
		if !b.pinned("east") {
			t.Fatal("a cluster dead for less than the grace stopped counting")
		}
		if d, ok := b.nextChange("east"); !ok || d != grace {
			t.Fatalf("nextChange = %v, %v; want the grace", d, ok)
		}
		clk.Step(grace)
		if pinned, changed := b.pinTransition("east"); pinned || !changed {
			t.Fatalf("after the grace: pinned %v changed %v", pinned, changed)
		}
		if _, ok := b.nextChange("east"); ok {
			t.Fatal("nothing is due for a cluster past its grace")
		}
		b.observe("east", at(clk.Now()))
		if pinned, changed := b.pinTransition("east"); !pinned || !changed {
			t.Fatalf("after renewing: pinned %v changed %v", pinned, changed)
		}
	})
	t.Run("a cluster without a Lease counts for the grace after the importer started", func(t *testing.T) {
		b, clk := newGraceBook(t)
		if !b.pinned("old") {
			t.Fatal("stopped counting at once")
		}
		if d, ok := b.nextChange("old"); !ok || d != grace {
			t.Fatalf("nextChange = %v, %v; want the grace", d, ok)
		}
		clk.Step(grace)
		if b.pinned("old") {
			t.Fatal("still counts past the grace")
		}
	})
	t.Run("a Lease seen first long after its renewal is past the grace at once", func(t *testing.T) {
		b, clk := newGraceBook(t)
		b.observe("east", at(clk.Now().Add(-time.Hour)))
		if b.pinned("east") {
			t.Fatal("a cluster dead for an hour counts")
		}
	})
	t.Run("a deleted Lease starts the grace when it was deleted, or when the cluster died before", func(t *testing.T) {
		b, clk := newGraceBook(t)
		b.observe("east", at(clk.Now()))
		b.forget("east")
		clk.Step(grace - time.Second)
		if !b.pinned("east") {
			t.Fatal("stopped counting before the grace")
		}
		clk.Step(time.Second)
		if b.pinned("east") {
			t.Fatal("counts past the grace")
		}
	})
	t.Run("this cluster always counts", func(t *testing.T) {
		b, clk := newGraceBook(t)
		clk.Step(10 * grace)
		if !b.pinned("home") {
			t.Fatal("this cluster stopped counting")
		}
	})
	t.Run("no grace runs out while the broker is unreachable", func(t *testing.T) {
		b, clk := newGraceBook(t)
		b.observe("east", at(clk.Now()))
		clk.Step(ttl)
		b.freeze(clk.Now())
		clk.Step(2 * grace)
		if !b.pinned("east") {
			t.Fatal("a grace ran out while frozen")
		}
	})
}
