package proxier

import (
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
)

// vipRecorder is a VIPObserver that keeps what it was told.
type vipRecorder struct {
	mu      sync.Mutex
	reports int
	carried map[netip.Addr]bool
}

func (r *vipRecorder) VIPsProgrammed(_ v1.IPFamily, added, removed []netip.Addr) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reports++
	for _, a := range removed {
		delete(r.carried, a)
	}
	for _, a := range added {
		r.carried[a] = true
	}
}

func (r *vipRecorder) state() (int, []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for a := range r.carried {
		out = append(out, a.String())
	}
	slices.Sort(out)
	return r.reports, out
}

func TestVIPObserverLearnsWhatIsCommitted(t *testing.T) {
	for _, mode := range []Mode{ModeNFTables, ModeIPTables} {
		t.Run(string(mode), func(t *testing.T) {
			testVIPObserverLearnsWhatIsCommitted(t, mode)
		})
	}
}

func testVIPObserverLearnsWhatIsCommitted(t *testing.T, mode Mode) {
	rec := &vipRecorder{carried: map[netip.Addr]bool{}}
	f := newFixture(t, v1.IPv4Protocol, func(c *Config) { c.VIPObserver = rec; c.Mode = mode })

	f.start()
	if n, carried := rec.state(); n != 1 || len(carried) != 0 {
		t.Fatalf("after a first sync with nothing: %d reports, carried %v; want one report of nothing", n, carried)
	}

	// The ServiceImport alone: its rules are committed, but its endpoints
	// are not known yet, so it is not reported carried.
	f.add(webImport())
	f.sync()
	if _, carried := rec.state(); len(carried) != 0 {
		t.Fatalf("carried %v before the service's EndpointSlices arrived", carried)
	}
	f.add(webSlices()...)
	f.sync()
	if _, carried := rec.state(); !slices.Equal(carried, []string{vip}) {
		t.Fatalf("after its slices were synced: carried %v, want [%s]", carried, vip)
	}

	// A sync that changes nothing reports nothing.
	n, _ := rec.state()
	f.sync()
	if m, _ := rec.state(); m != n {
		t.Errorf("a sync without changes reported to the observer")
	}

	// A failed transaction commits nothing, so nothing is reported.
	other := newImport("other", []string{"243.1.0.20"}, []mcsv1beta1.ServicePort{tcpPort("http", 80)})
	f.add(other, newSlice("other", remoteCluster, []slicePort{tcp("http", 80, 8080)}))
	f.failNextSync()
	if err := f.p.runner.fn(); err == nil {
		t.Fatal("the sync did not fail")
	}
	if _, carried := rec.state(); slices.Contains(carried, "243.1.0.20") {
		t.Fatalf("a ClusterSetIP whose transaction failed is reported carried")
	}
	f.sync()
	if _, carried := rec.state(); !slices.Equal(carried, []string{vip, "243.1.0.20"}) {
		t.Fatalf("after the retry (an empty slice settles it): carried %v", carried)
	}

	// A service that never gets a slice is reported once settleTimeout
	// has passed.
	f.add(newImport("lonely", []string{"243.1.0.30"}, []mcsv1beta1.ServicePort{tcpPort("http", 80)}))
	f.sync()
	f.clock.Step(settleTimeout - time.Millisecond)
	f.sync()
	if _, carried := rec.state(); slices.Contains(carried, "243.1.0.30") {
		t.Fatalf("a service without slices is reported carried before settleTimeout")
	}
	f.clock.Step(time.Millisecond)
	f.sync()
	if _, carried := rec.state(); !slices.Contains(carried, "243.1.0.30") {
		t.Fatalf("a service without slices is not reported carried after settleTimeout: %v", carried)
	}

	f.p.OnServiceImportDelete(webImport())
	f.sync()
	if _, carried := rec.state(); !slices.Equal(carried, []string{"243.1.0.20", "243.1.0.30"}) {
		t.Errorf("after the import went: carried %v, want 243.1.0.20 and 243.1.0.30", carried)
	}
}
