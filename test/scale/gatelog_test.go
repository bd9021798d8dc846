package scale

import (
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestReleasedByReadsOnlyTheReleaseLinesOfAGatenodeLog(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gate-node-0001.log")
	log := "I1129 10:00:00.000000 1 reflector.go:1] released 1.2.3.4 5\n" +
		"released 243.0.0.1 1764410400000000001\n" +
		"released not-an-address 1\n" +
		"released 243.0.0.2 1764410400000000002\n" +
		"released 243.0.0.3\n"
	if err := os.WriteFile(path, []byte(log), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := releasedBy(path)
	if err != nil {
		t.Fatal(err)
	}
	want := map[netip.Addr]time.Time{
		netip.MustParseAddr("243.0.0.1"): time.Unix(0, 1764410400000000001),
		netip.MustParseAddr("243.0.0.2"): time.Unix(0, 1764410400000000002),
	}
	if len(got) != len(want) {
		t.Fatalf("releasedBy read %v, want %v", got, want)
	}
	for a, at := range want {
		if !got[a].Equal(at) {
			t.Errorf("%s released at %v, want %v", a, got[a], at)
		}
	}
}

func TestGateSizesRefusesWhatIsNotAPositiveNumber(t *testing.T) {
	for _, c := range []struct{ nodes, batch string }{{"100,x", ""}, {"0", ""}, {"", "-1"}, {"", "60001"}} {
		t.Setenv("MCSD_GATE_NODES", c.nodes)
		t.Setenv("MCSD_GATE_BATCH", c.batch)
		if _, _, err := gateSizes(); err == nil {
			t.Errorf("MCSD_GATE_NODES=%q MCSD_GATE_BATCH=%q: no error", c.nodes, c.batch)
		}
	}
	t.Setenv("MCSD_GATE_NODES", "")
	t.Setenv("MCSD_GATE_BATCH", "")
	if nodes, batch, err := gateSizes(); err != nil || len(nodes) != 2 || nodes[0] != 100 || nodes[1] != 500 || batch != 40 {
		t.Errorf("defaults: %v %d %v, want [100 500] 40", nodes, batch, err)
	}
}
