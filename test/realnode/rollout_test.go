package realnode

import (
	"context"
	"testing"
	"time"
)

// A rolling update of the DaemonSet to a new image tag, as an operator
// makes one (kubectl mcs join again with --image), in the
// client's cluster and then in the exporting one, while a TCP connection
// through the ClusterSetIP stays open and every client polls the name
// through its cluster DNS every 50 ms: the connection survives, no query
// fails, and every new pod is Ready.
func testRollingUpdate(t *testing.T) {
	w := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	const ns, name = "rollout", "steady"
	vip := w.exportedEcho(ctx, t, ns, name)
	tr := w.startTraffic(ctx, t, ns, name, vip, false)
	for _, m := range w.members {
		began := time.Now()
		if err := w.installMCSD(ctx, m, w.mcsd[1]); err != nil {
			tr.stop(t, "the failed rolling update")
			t.Fatal(err)
		}
		t.Logf("figure: %s: rolling update to %s, every pod Ready %v after kubectl mcs join --image (from %s to %s)", m.Name, w.mcsd[1].Ref, time.Since(began).Round(10*time.Millisecond), began.Format(time.StampMilli), time.Now().Format(time.StampMilli))
	}
	tr.stop(t, "the rolling updates")
}
