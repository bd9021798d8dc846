package importer

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

	t.Run("while the broker is unreachable nobody dies, and on its return live clusters get a fresh TTL", func(t *testing.T) {
		b, clk := newBook(t)
		b.observe("east", renewal("v1"))
		b.observe("west", renewal("v1"))
		clk.Step(ttl + time.Second)
		b.observe("west", renewal("v2")) // east is dead before the outage, west is not
		expectLive(t, b, "east", false)
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
		clk.Step(ttl - time.Millisecond)
		expectLive(t, b, "west", true)
		clk.Step(time.Millisecond)
		expectLive(t, b, "west", false)
	})

	t.Run("a cluster that dies during the outage is dropped one TTL after the broker returns", func(t *testing.T) {
		b, clk := newBook(t)
		b.observe("east", renewal("v1"))
		b.freeze(clk.Now())
		clk.Step(time.Minute)
		b.thaw()
		clk.Step(ttl)
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
