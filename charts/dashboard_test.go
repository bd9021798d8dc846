package charts_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/mcsd-io/mcsd/test/lib/dashboard"
	"github.com/mcsd-io/mcsd/test/lib/testenv"
)

const dashboardFile = "mcsd/files/grafana-dashboard.json"

// Every query of the dashboard is PromQL that Prometheus's own parser
// accepts (promtool checks them as recording rules), and names series of
// the families mcsd exports. Whether mcsd exports each one is for the
// real-node run (test/realnode, "the dashboard's series are live").
func TestDashboardQueriesParse(t *testing.T) {
	testenv.RequireCommands(t, "promtool")
	qs, err := dashboard.Load(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	if len(qs) < 30 {
		t.Fatalf("%s has %d queries, want the 30 or more of its panels", dashboardFile, len(qs))
	}
	var rules []map[string]string
	for i, q := range qs {
		names, err := dashboard.MetricNames(q.Expr)
		if err != nil {
			t.Errorf("%s: %v", q.Where, err)
		}
		if len(names) == 0 {
			t.Errorf("%s names no series: %s", q.Where, q.Expr)
		}
		for _, n := range names {
			if !strings.HasPrefix(n, "mcsd_") && !strings.HasPrefix(n, "workqueue_") && !strings.HasPrefix(n, "rest_client_") && !strings.HasPrefix(n, "leader_election_") {
				t.Errorf("%s names %s, of no family mcsd exports", q.Where, n)
			}
		}
		rules = append(rules, map[string]string{"record": fmt.Sprintf("dashboard:query%d", i), "expr": q.Expr})
	}
	data, err := yaml.Marshal(map[string]any{"groups": []any{map[string]any{"name": "dashboard", "rules": rules}}})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "dashboard-rules.yaml")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("promtool", "check", "rules", path).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool check rules refuses a query of the dashboard: %v\n%s\n%s", err, out, data)
	}
	t.Logf("%d queries of %s parse", len(qs), dashboardFile)
}
