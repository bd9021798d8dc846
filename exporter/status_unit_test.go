package exporter

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clienttesting "k8s.io/client-go/testing"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/mcsd-io/mcsd/internal/merge"
)

// condition is a stored condition of generation 1 that changed at
// exportCreated.
func condition(typ string, status metav1.ConditionStatus, reason, message string) metav1.Condition {
	return metav1.Condition{Type: typ, Status: status, Reason: reason, Message: message, ObservedGeneration: 1, LastTransitionTime: exportCreated}
}

// exportedConditions are those of an export on the broker with a VIP.
func exportedConditions() []metav1.Condition {
	return []metav1.Condition{
		condition(conditionValid, metav1.ConditionTrue, string(mcsv1beta1.ServiceExportReasonValid), "The Service can be exported"),
		condition(conditionReady, metav1.ConditionTrue, string(mcsv1beta1.ServiceExportReasonExported), "The export is on the broker"),
		condition(conditionConflict, metav1.ConditionFalse, string(mcsv1beta1.ServiceExportReasonNoConflicts), "No conflicts: this is the only export of the service."),
		condition(ConditionClusterSetIP, metav1.ConditionTrue, "Allocated", "ClusterSetIPs: 243.1.0.1"),
	}
}

// withConditions is the test ServiceExport at generation 2 with conds.
func withConditions(conds []metav1.Condition) *mcsv1beta1.ServiceExport {
	return serviceExport(func(se *mcsv1beta1.ServiceExport) {
		se.Generation = 2
		se.Status.Conditions = conds
	})
}

func TestStatusTransitions(t *testing.T) {
	vipExport := export(testCluster, exportCreated.Time, "243.1.0.1", "fd7a:6d63:7364:1::1")
	headless := export(testCluster, exportCreated.Time)
	headless.Type = mcsv1beta1.Headless
	optedOut := export(testCluster, exportCreated.Time)
	optedOut.ClusterSetIPDisabled = true

	type want struct {
		typ     string
		status  metav1.ConditionStatus
		reason  string
		message string // the whole message; "" to skip
	}
	for _, tc := range []struct {
		name   string
		start  []metav1.Condition
		change func(*status)
		want   []want
		absent []string
	}{
		{
			name:  "an invalid export is not ready and loses its conflict and VIP conditions",
			start: exportedConditions(),
			change: func(s *status) {
				s.invalid(mcsv1beta1.ServiceExportReasonNoService, "Service shop/cart does not exist")
			},
			want: []want{
				{conditionValid, metav1.ConditionFalse, "NoService", "Service shop/cart does not exist"},
				{conditionReady, metav1.ConditionFalse, "Failed", "Not exported: Service shop/cart does not exist"},
			},
			absent: []string{conditionConflict, ConditionClusterSetIP},
		},
		{
			name:   "a new valid export is pending until it is written",
			change: func(s *status) { s.valid() },
			want: []want{
				{conditionValid, metav1.ConditionTrue, "Valid", "The Service can be exported"},
				{conditionReady, metav1.ConditionUnknown, "Pending", "Writing the export to the broker"},
			},
		},
		{
			name:   "a valid export keeps the Ready it had while it is written again",
			start:  exportedConditions(),
			change: func(s *status) { s.valid() },
			want:   []want{{conditionReady, metav1.ConditionTrue, "Exported", "The export is on the broker"}},
		},
		{
			name:   "an export that becomes valid again is no longer NoService",
			start:  []metav1.Condition{condition(conditionValid, metav1.ConditionFalse, "NoService", "gone")},
			change: func(s *status) { s.valid() },
			want:   []want{{conditionValid, metav1.ConditionTrue, "Valid", "The Service can be exported"}},
		},
		{
			name:   "a failed write says why and that it is retried",
			start:  exportedConditions(),
			change: func(s *status) { s.failed(errors.New("the broker is down")) },
			want:   []want{{conditionReady, metav1.ConditionFalse, "Failed", "Cannot write the export to the broker (retrying): the broker is down"}},
		},
		{
			name:   "a written export is ready",
			change: func(s *status) { s.valid(); s.exported() },
			want:   []want{{conditionReady, metav1.ConditionTrue, "Exported", "The export is on the broker"}},
		},
		{
			name:   "an export with VIPs says which",
			change: func(s *status) { s.clusterSetIP(vipExport, nil) },
			want:   []want{{ConditionClusterSetIP, metav1.ConditionTrue, "Allocated", "ClusterSetIPs: 243.1.0.1, fd7a:6d63:7364:1::1"}},
		},
		{
			name: "an exhausted block is Exhausted",
			change: func(s *status) {
				s.clusterSetIP(export(testCluster, exportCreated.Time), fmt.Errorf("%w: no free address", errVIPExhausted))
			},
			want: []want{{ConditionClusterSetIP, metav1.ConditionFalse, "Exhausted", "ClusterSetIP block exhausted: no free address"}},
		},
		{
			name: "a family without a block is Unavailable",
			change: func(s *status) {
				s.clusterSetIP(export(testCluster, exportCreated.Time), errors.New("no IPv6 ClusterSetIP block is configured"))
			},
			want: []want{{ConditionClusterSetIP, metav1.ConditionFalse, "Unavailable", "no IPv6 ClusterSetIP block is configured"}},
		},
		{
			name:   "a headless export has no VIP condition",
			start:  exportedConditions(),
			change: func(s *status) { s.clusterSetIP(headless, nil) },
			absent: []string{ConditionClusterSetIP},
		},
		{
			name:   "an export with VIPs off has no VIP condition",
			start:  exportedConditions(),
			change: func(s *status) { s.clusterSetIP(optedOut, nil) },
			absent: []string{ConditionClusterSetIP},
		},
		{
			name:   "an export still without a VIP has no VIP condition",
			start:  exportedConditions(),
			change: func(s *status) { s.clusterSetIP(export(testCluster, exportCreated.Time), nil) },
			absent: []string{ConditionClusterSetIP},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			se := withConditions(slices.Clone(tc.start))
			s := newStatus(se)
			tc.change(s)
			for _, w := range tc.want {
				c := wantCondition(t, s.conditions, w.typ, w.status, w.reason)
				if w.message != "" && c.Message != w.message {
					t.Fatalf("%s message %q, want %q", w.typ, c.Message, w.message)
				}
				if old := findCondition(tc.start, w.typ); old != nil && old.Status == c.Status {
					if !c.LastTransitionTime.Equal(&old.LastTransitionTime) {
						t.Fatalf("%s kept its status but changed at %v, want %v", w.typ, c.LastTransitionTime, old.LastTransitionTime)
					}
				} else if c.LastTransitionTime.Equal(&exportCreated) || c.ObservedGeneration != 2 {
					t.Fatalf("%s changed status but not its transition time or generation: %+v", w.typ, c)
				}
			}
			for _, typ := range tc.absent {
				wantNoCondition(t, s.conditions, typ)
			}
			if !apiequality.Semantic.DeepEqual(se.Status.Conditions, tc.start) {
				t.Fatal("computing the status changed the cached ServiceExport")
			}
		})
	}
}

func findCondition(conds []metav1.Condition, typ string) *metav1.Condition {
	for i := range conds {
		if conds[i].Type == typ {
			return &conds[i]
		}
	}
	return nil
}

func TestConflictConditionFromTheMergesVerdict(t *testing.T) {
	long := strings.Repeat("x", 40*1024)
	for _, tc := range []struct {
		name    string
		verdict merge.Verdict
		status  metav1.ConditionStatus
		reason  string
		message string
	}{
		{"no conflict is Conflict=False/NoConflicts", merge.Verdict{Message: "No conflicts among the 2 exports of the service."},
			metav1.ConditionFalse, "NoConflicts", "No conflicts among the 2 exports of the service."},
		{"one conflict is named by its reason", merge.Verdict{Reasons: []mcsv1beta1.ServiceExportConditionReason{mcsv1beta1.ServiceExportReasonPortConflict}, Message: "Conflicting ports."},
			metav1.ConditionTrue, "PortConflict", "Conflicting ports."},
		{"several conflicts are comma-joined", merge.Verdict{Reasons: []mcsv1beta1.ServiceExportConditionReason{
			mcsv1beta1.ServiceExportReasonTypeConflict, merge.ReasonClusterSetIPConflict}, Message: "Conflicting type."},
			metav1.ConditionTrue, "TypeConflict,ClusterSetIPConflict", "Conflicting type."},
		{"a message over the API's limit is truncated", merge.Verdict{Reasons: []mcsv1beta1.ServiceExportConditionReason{mcsv1beta1.ServiceExportReasonPortConflict}, Message: long},
			metav1.ConditionTrue, "PortConflict", long[:32*1024-3] + "..."},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newStatus(withConditions(nil))
			s.conflict(tc.verdict)
			c := wantCondition(t, s.conditions, conditionConflict, tc.status, tc.reason)
			if c.Message != tc.message {
				t.Fatalf("message of %d bytes %.40q..., want %d bytes %.40q...", len(c.Message), c.Message, len(tc.message), tc.message)
			}
			if c.ObservedGeneration != 2 {
				t.Fatalf("observedGeneration %d, want 2", c.ObservedGeneration)
			}
		})
	}
}

func TestTruncateKeepsMessagesWithinTheAPILimit(t *testing.T) {
	const limit = 32 * 1024
	for _, tc := range []struct {
		name string
		in   string
		want string
	}{
		{"a short message is kept", "short", "short"},
		{"an empty message is kept", "", ""},
		{"a message at the limit is kept", strings.Repeat("a", limit), strings.Repeat("a", limit)},
		{"a message one byte over is cut to the limit with an ellipsis", strings.Repeat("a", limit+1), strings.Repeat("a", limit-3) + "..."},
		{"a long message keeps its beginning", "begin" + strings.Repeat("b", 2*limit), "begin" + strings.Repeat("b", limit-8) + "..."},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := truncate(tc.in); got != tc.want {
				t.Fatalf("truncate gave %d bytes ending %q, want %d bytes ending %q", len(got), tail(got), len(tc.want), tail(tc.want))
			}
		})
	}
}

func tail(s string) string { return s[max(0, len(s)-8):] }

func TestGoodConditions(t *testing.T) {
	for _, tc := range []struct {
		name string
		c    metav1.Condition
		want bool
	}{
		{"Valid=True is good", metav1.Condition{Type: conditionValid, Status: metav1.ConditionTrue}, true},
		{"Ready=False is bad", metav1.Condition{Type: conditionReady, Status: metav1.ConditionFalse}, false},
		{"Ready=Unknown is not good", metav1.Condition{Type: conditionReady, Status: metav1.ConditionUnknown}, false},
		{"Conflict=False is good", metav1.Condition{Type: conditionConflict, Status: metav1.ConditionFalse}, true},
		{"Conflict=True is bad", metav1.Condition{Type: conditionConflict, Status: metav1.ConditionTrue}, false},
		{"ClusterSetIPAllocated=False is bad", metav1.Condition{Type: ConditionClusterSetIP, Status: metav1.ConditionFalse}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := good(tc.c); got != tc.want {
				t.Fatalf("good = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestWriteStatusWritesOnlyWhatChanged(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(*status)
		writes bool
		events []string
	}{
		{"equal conditions write nothing and record no event", func(*status) {}, false, nil},
		{"setting a condition as it is writes nothing", func(s *status) { s.valid(); s.exported() }, false, nil},
		{"a condition that turns bad is written with a warning", func(s *status) { s.failed(errors.New("the broker is down")) }, true,
			[]string{"Warning Failed Ready=False: Cannot write the export to the broker (retrying): the broker is down"}},
		{"a conflict is written with a warning", func(s *status) {
			s.conflict(merge.Verdict{Reasons: []mcsv1beta1.ServiceExportConditionReason{mcsv1beta1.ServiceExportReasonPortConflict}, Message: "Conflicting ports."})
		}, true, []string{"Warning PortConflict Conflict=True: Conflicting ports."}},
		{"an invalid export is written with a warning for each condition that changed", func(s *status) {
			s.invalid(mcsv1beta1.ServiceExportReasonNoService, "Service shop/cart does not exist")
		}, true, []string{
			"Warning NoService Valid=False: Service shop/cart does not exist",
			"Warning Failed Ready=False: Not exported: Service shop/cart does not exist",
		}},
		{"a message that changed alone is written without an event", func(s *status) {
			s.conflict(merge.Verdict{Message: "No conflicts among the 2 exports of the service."})
		}, true, nil},
		{"a good condition whose reason changed is written without an event", func(s *status) {
			s.set(conditionReady, metav1.ConditionTrue, "Ready", "ready")
		}, true, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, nil)
			se := serviceExport(func(se *mcsv1beta1.ServiceExport) { se.Status.Conditions = exportedConditions() })
			f.add(se)
			s := newStatus(se)
			tc.change(s)
			if err := f.c.writeStatus(f.ctx, se, s); err != nil {
				t.Fatal(err)
			}
			w := f.writes()
			if got := len(w) > 0; got != tc.writes {
				t.Fatalf("writes %q, want a write: %v", w, tc.writes)
			}
			if tc.writes {
				if len(w) != 1 || w[0] != "update serviceexports/status cart" {
					t.Fatalf("writes %q, want one status update", w)
				}
				if got := f.conditions(); !apiequality.Semantic.DeepEqual(got, s.conditions) {
					t.Fatalf("stored conditions %+v, want %+v", got, s.conditions)
				}
			}
			var events []string
			for e := f.event(); e != ""; e = f.event() {
				events = append(events, e)
			}
			if strings.Join(events, "\n") != strings.Join(tc.events, "\n") {
				t.Fatalf("events %q, want %q", events, tc.events)
			}
		})
	}

	eventsOf := func(f *fixture) []string {
		var events []string
		for e := f.event(); e != ""; e = f.event() {
			events = append(events, e)
		}
		return events
	}
	t.Run("a condition that recovers from bad is written with a normal event", func(t *testing.T) {
		f := newFixture(t, nil)
		se := serviceExport(func(se *mcsv1beta1.ServiceExport) { se.Status.Conditions = exportedConditions() })
		s := newStatus(se)
		s.failed(errors.New("the broker is down"))
		se.Status.Conditions = s.conditions
		f.add(se)
		s = newStatus(se)
		s.exported()
		if err := f.c.writeStatus(f.ctx, se, s); err != nil {
			t.Fatal(err)
		}
		if got := eventsOf(f); len(got) != 1 || got[0] != "Normal Exported Ready=True: The export is on the broker" {
			t.Fatalf("events %q, want one normal Exported", got)
		}
	})
	t.Run("a new export that becomes valid and exported is written without events", func(t *testing.T) {
		f := newFixture(t, nil)
		se := serviceExport(nil)
		f.add(se)
		s := newStatus(se)
		s.valid()
		s.exported()
		if err := f.c.writeStatus(f.ctx, se, s); err != nil {
			t.Fatal(err)
		}
		if w := f.writes(); len(w) != 1 {
			t.Fatalf("writes %q, want the status", w)
		}
		if got := eventsOf(f); len(got) != 0 {
			t.Fatalf("events %q, want none", got)
		}
	})

	t.Run("a status that cannot be written is an error naming the export", func(t *testing.T) {
		f := newFixture(t, nil)
		se := serviceExport(nil)
		f.add(se)
		f.localMCS.PrependReactor("update", "serviceexports", func(clienttesting.Action) (bool, runtime.Object, error) {
			return true, nil, errors.New("conflict")
		})
		s := newStatus(se)
		s.valid()
		err := f.c.writeStatus(f.ctx, se, s)
		if err == nil {
			t.Fatal("writeStatus succeeded although the update failed")
		}
		wantMessage(t, err.Error(), "updating status of ServiceExport shop/cart", "conflict")
	})
}

// A condition whose status stays the same keeps the time it last changed,
// even when its message does.
func TestSyncKeepsTheTransitionTimesOfConditionsThatDidNotChange(t *testing.T) {
	f := newFixture(t, nil)
	f.add(serviceExport(nil), clusterIPService(), otherRecord("west", exportCreated.Add(time.Hour), nil))
	f.mustSync()
	first := f.conditions()
	f.settle()
	// Another cluster joins: the Conflict message changes, not its status.
	f.add(otherRecord("north", exportCreated.Add(2*time.Hour), nil))
	f.mustSync()
	second := f.conditions()
	for _, typ := range []string{conditionValid, conditionReady, conditionConflict} {
		a, b := findCondition(first, typ), findCondition(second, typ)
		if a == nil || b == nil || !a.LastTransitionTime.Equal(&b.LastTransitionTime) {
			t.Fatalf("%s changed at %v, then at %v: want its first transition kept", typ, a, b)
		}
	}
	wantMessage(t, findCondition(second, conditionConflict).Message, "No conflicts among the 3 exports")
}
