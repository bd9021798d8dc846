package realnode

import (
	"reflect"
	"testing"
)

func TestPromQLMetricNames(t *testing.T) {
	for _, tc := range []struct {
		expr string
		want []string
	}{
		{`up`, []string{"up"}},
		{`rate(a_total{job=~"x|by(y)", le="0.5"}[5m])`, []string{"a_total"}},
		{`sum by (instance, le) (rate(h_bucket[5m])) / on (instance) group_left (version) b_info`, []string{"b_info", "h_bucket"}},
		{`histogram_quantile(0.99, sum without (pod) (rate(x_bucket[1m] offset 5m)))`, []string{"x_bucket"}},
		{`(a < max_over_time(a[1h])) unless on (instance) (c{name="m"} == 0)`, []string{"a", "c"}},
		{`{__name__="via_matcher", job="j"} or vector(0)`, []string{"via_matcher"}},
		{`time() - max by (i) (ts_seconds) > 1e3 and bool 2`, []string{"ts_seconds"}},
		{`topk(3, sum(rate(q_total{rcode="SERVFAIL"}[5m])) by (rcode))`, []string{"q_total"}},
		{`count_values("v", b_info) # a comment naming not_a_metric`, []string{"b_info"}},
		{`x:recorded:rate5m @ start()`, []string{"x:recorded:rate5m"}},
	} {
		got, err := metricNames(tc.expr)
		if err != nil {
			t.Errorf("%s: %v", tc.expr, err)
			continue
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("metricNames(%s) = %v, want %v", tc.expr, got, tc.want)
		}
	}
}

func TestPromQLMetricNamesRefusesUnbalanced(t *testing.T) {
	for _, expr := range []string{`rate(a[5m]`, `a{b="c"`, `a{b="c}`, `sum(a))`, `a[5m`} {
		if got, err := metricNames(expr); err == nil {
			t.Errorf("metricNames(%s) = %v, want an error", expr, got)
		}
	}
}

func TestDashboardVariablesAreSubstituted(t *testing.T) {
	qs, err := loadDashboard("testdata/dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	want := []dashboardQuery{
		{`panel "Row" target A`, `rate(a_total{job=~".*"}[5m])`},
		{`panel "Nested" target B`, `sum by (le) (rate(h_bucket{instance=~".*"}[5m]))`},
		{`variable "job"`, `b_info`},
	}
	if !reflect.DeepEqual(qs, want) {
		t.Errorf("Load = %q\nwant %q", qs, want)
	}
}
