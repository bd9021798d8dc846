package realnode

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// An upgrade of a running clusterset from the previous commit's mcsd to
// this one's, in the README's order: the broker, then each member with this
// commit's kubectl mcs join --image, one at a time, waiting for its
// rollout. The clusterset first moves to the previous commit, installed by
// that commit's own kubectl-mcs (broker install, then join per member),
// since the shared installation runs this commit's. During the upgrade a
// service of cluster2 stays imported: in no member is its ServiceImport or
// an MCS EndpointSlice deleted, or its ready endpoints gone; no new
// connection through its ClusterSetIP fails, nor a long-lived one, nor a
// DNS query of its name.
func testUpgrade(t *testing.T) {
	w := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	began := time.Now()
	prev := w.buildPrevious(ctx, t)
	t.Logf("figure: the previous commit %s checked out, its image %s and kubectl-mcs built and imported in %v", prev.rev, prev.mcsd.Ref, time.Since(began).Round(10*time.Millisecond))
	began = time.Now()
	if err := w.installBrokerWith(ctx, prev.binDir); err != nil {
		t.Fatal(err)
	}
	for _, m := range w.members {
		if err := w.joinWith(ctx, prev.binDir, m, prev.mcsd); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("figure: the clusterset runs %s, installed by the previous kubectl-mcs, in %v", prev.mcsd.Ref, time.Since(began).Round(10*time.Millisecond))

	const ns, name = "upgrade", "steady"
	vip := w.exportedEcho(ctx, t, ns, name)
	watch := w.watchImports(ctx, t, ns, name)
	tr := w.startTraffic(ctx, t, ns, name, vip, true)
	err := w.upgrade(ctx, t)
	during := fmt.Sprintf("the upgrade from %s to %s", prev.mcsd.Ref, w.mcsd[1].Ref)
	tr.stop(t, during)
	changes, losses := watch.result()
	t.Logf("figure: during %s: %d imported objects or endpoints lost (%d changes watched in %d members)", during, len(losses), changes, len(w.members))
	for _, l := range losses {
		t.Errorf("imported service lost: %s", l)
	}
	if err != nil {
		t.Fatal(err)
	}
}

// upgrade upgrades the clusterset to this commit's mcsd as the README
// says: the broker, then each member, waiting for its rollout.
func (w *world) upgrade(ctx context.Context, t *testing.T) error {
	began := time.Now()
	if err := w.installBroker(ctx); err != nil {
		return err
	}
	t.Logf("figure: broker upgraded by kubectl mcs broker install in %v", time.Since(began).Round(10*time.Millisecond))
	for _, m := range w.members {
		began := time.Now()
		if err := w.installMCSD(ctx, m, w.mcsd[1]); err != nil {
			return err
		}
		t.Logf("figure: %s upgraded to %s, every pod Ready %v after kubectl mcs join --image", m.Name, w.mcsd[1].Ref, time.Since(began).Round(10*time.Millisecond))
	}
	return nil
}
