package dnsgate

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	clienttesting "k8s.io/client-go/testing"
)

func TestTheSummaryIsWhatEveryLiveNodeCarries(t *testing.T) {
	w := start(t)
	a, b := netip.MustParseAddr("243.1.0.1"), netip.MustParseAddr("243.1.0.2")
	w.peer("node-b", "12", a.String())
	w.peer("node-c", "10", b.String())
	w.peer("node-d", "5", "243.1.0.3")
	w.podOn("node-d", false)
	got := w.agg.Summary()
	t.Run("the lowest Through and every pending address of the live nodes", func(t *testing.T) {
		if got.Through != "10" || !slices.Equal(got.Pending, []netip.Addr{a, b}) || got.LiveNodes != 2 || got.Orderless {
			t.Fatalf("summary %+v, want Through 10, pending [%s %s], 2 live nodes", got, a, b)
		}
	})
	t.Run("it is written in the summary Lease, which reads back the same", func(t *testing.T) {
		w.await("the summary Lease written", func() bool {
			l, err := w.client.CoordinationV1().Leases(ns).Get(w.ctx, SummaryLeaseName, metav1.GetOptions{})
			return err == nil && summaryOf(l).equal(got) && l.Labels[LabelComponent] == ComponentSummary
		})
	})
	t.Run("a live node that has seen no ServiceImport holds every ClusterSetIP back", func(t *testing.T) {
		w.peer("node-e", "")
		if got := w.agg.Summary(); got.Through != "" || got.LiveNodes != 3 {
			t.Fatalf("summary %+v, want Through empty with 3 live nodes", got)
		}
	})
}

func TestATooLongSummaryHoldsEverythingBack(t *testing.T) {
	w := start(t)
	w.agg.cfg.MaxPending = 2
	for i := range 3 {
		w.peer(fmt.Sprintf("node-%d", i), "20", fmt.Sprintf("243.1.0.%d", 10+i))
	}
	if got := w.agg.Summary(); got.Through != "" || len(got.Pending) != 0 || got.LiveNodes != 3 {
		t.Fatalf("summary %+v, want nothing pending and Through empty", got)
	}
}

func TestReportsThatDoNotCompareMakeAnOrderlessSummary(t *testing.T) {
	w := start(t)
	w.peer("node-b", "12")
	w.peer("node-c", "not-a-number")
	w.importOf("web", "10", vip.String())
	carried(w, vip.String())
	if got := w.agg.Summary(); !got.Orderless {
		t.Fatalf("summary %+v, want orderless", got)
	}
	w.await("handed out: the summary cannot order the reports", func() bool { return w.dns.hands(vip) })
}

// A node's gate watches the summary, one object, never the other nodes'
// reports: what a batch of changes costs each node does not grow with the
// number of nodes. Only the aggregator lists the reports.
func TestAGateWatchesOnlyTheSummary(t *testing.T) {
	w := start(t)
	w.peer("node-b", "12")
	summary := fields.OneTermEqualSelector("metadata.name", SummaryLeaseName).String()
	reports := labels.SelectorFromSet(labels.Set{LabelComponent: ComponentNodeReport}).String()
	var gateWatches int
	for _, a := range w.client.Actions() {
		if a.GetResource().Resource != "leases" {
			continue
		}
		var byLabel, byField string
		switch r := a.(type) {
		case clienttesting.ListAction:
			byLabel, byField = r.GetListRestrictions().Labels.String(), r.GetListRestrictions().Fields.String()
		case clienttesting.WatchAction:
			byLabel, byField = r.GetWatchRestrictions().Labels.String(), r.GetWatchRestrictions().Fields.String()
		default:
			continue
		}
		switch {
		case byField == summary && byLabel == "":
			gateWatches++
		case byLabel == reports && byField == "":
		default:
			t.Errorf("a %s of Leases selected by labels %q, fields %q: neither the summary nor the aggregator's reports", a.GetVerb(), byLabel, byField)
		}
	}
	if gateWatches == 0 {
		t.Fatal("the gate never listed or watched the summary")
	}
}
