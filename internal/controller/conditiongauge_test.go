package controller

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestGaugeCountsObjectsByCondition(t *testing.T) {
	g := newConditionGauge("thinger", "things_by_condition", "Things by condition, status and reason.")
	reg := prometheus.NewRegistry()
	reg.MustRegister(g.Collector())

	g.Set("ns", "a", metav1.Condition{Type: "Ready", Status: metav1.ConditionFalse, Reason: "Pending"})
	g.Set("ns", "a", metav1.Condition{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Ready"})
	g.Set("ns", "a", metav1.Condition{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Ready"})
	g.Set("ns", "a", metav1.Condition{Type: "Valid", Status: metav1.ConditionTrue, Reason: "Valid"})
	g.Set("ns", "b", metav1.Condition{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Ready"})
	g.Set("ns", "c", metav1.Condition{Type: "Ready", Status: metav1.ConditionFalse, Reason: "Pending"})
	want := `
# HELP mcsd_thinger_things_by_condition Things by condition, status and reason.
# TYPE mcsd_thinger_things_by_condition gauge
mcsd_thinger_things_by_condition{condition="Ready",reason="Pending",status="False"} 1
mcsd_thinger_things_by_condition{condition="Ready",reason="Ready",status="True"} 2
mcsd_thinger_things_by_condition{condition="Valid",reason="Valid",status="True"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Fatal(err)
	}

	t.Run("a forgotten object is no longer counted", func(t *testing.T) {
		g.Forget("ns", "a")
		g.Forget("ns", "never-seen")
		want := `
# HELP mcsd_thinger_things_by_condition Things by condition, status and reason.
# TYPE mcsd_thinger_things_by_condition gauge
mcsd_thinger_things_by_condition{condition="Ready",reason="Pending",status="False"} 1
mcsd_thinger_things_by_condition{condition="Ready",reason="Ready",status="True"} 1
mcsd_thinger_things_by_condition{condition="Valid",reason="Valid",status="True"} 0
`
		if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("ten thousand objects make as many series as conditions, statuses and reasons", func(t *testing.T) {
		for i := range 10000 {
			g.Set("ns", "svc-"+string(rune('a'+i%26))+strings.Repeat("x", i/26), metav1.Condition{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Ready"})
		}
		if n := testutil.CollectAndCount(g.Collector()); n != 3 {
			t.Fatalf("%d series for 10,000 objects, want 3", n)
		}
	})
}
