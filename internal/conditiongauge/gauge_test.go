package conditiongauge

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestGauge(t *testing.T) {
	g := New("thing_condition", "1 for the current status of each condition.")
	reg := prometheus.NewRegistry()
	reg.MustRegister(g.Collector())

	g.Set("ns", "a", metav1.Condition{Type: "Ready", Status: metav1.ConditionFalse})
	g.Set("ns", "a", metav1.Condition{Type: "Ready", Status: metav1.ConditionTrue})
	g.Set("ns", "a", metav1.Condition{Type: "Valid", Status: metav1.ConditionTrue})
	g.Set("ns", "b", metav1.Condition{Type: "Ready", Status: metav1.ConditionUnknown})
	want := `
# HELP mcsd_thing_condition 1 for the current status of each condition.
# TYPE mcsd_thing_condition gauge
mcsd_thing_condition{condition="Ready",name="a",namespace="ns",status="False"} 0
mcsd_thing_condition{condition="Ready",name="a",namespace="ns",status="True"} 1
mcsd_thing_condition{condition="Ready",name="a",namespace="ns",status="Unknown"} 0
mcsd_thing_condition{condition="Ready",name="b",namespace="ns",status="False"} 0
mcsd_thing_condition{condition="Ready",name="b",namespace="ns",status="True"} 0
mcsd_thing_condition{condition="Ready",name="b",namespace="ns",status="Unknown"} 1
mcsd_thing_condition{condition="Valid",name="a",namespace="ns",status="False"} 0
mcsd_thing_condition{condition="Valid",name="a",namespace="ns",status="True"} 1
mcsd_thing_condition{condition="Valid",name="a",namespace="ns",status="Unknown"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Fatal(err)
	}

	t.Run("a forgotten object leaves no series", func(t *testing.T) {
		g.Forget("ns", "a")
		if n := testutil.CollectAndCount(g.Collector()); n != 3 {
			t.Fatalf("%d series after forgetting ns/a, want the 3 of ns/b", n)
		}
	})
}
