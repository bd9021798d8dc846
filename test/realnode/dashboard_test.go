package realnode

import (
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/yaml"

	"github.com/mcsd-io/mcsd/test/lib/repo"
	"github.com/mcsd-io/mcsd/test/lib/testenv"
)

// dashboardPath is the chart's Grafana dashboard, under the repository.
var dashboardPath = filepath.Join("charts", "mcsd", "files", "grafana-dashboard.json")

// Every query of the dashboard is PromQL that Prometheus's own parser
// accepts (promtool checks them as recording rules) and names series of
// the families mcsd exports. That mcsd exports each one is checked on the
// real nodes (testDashboardSeriesLive). No real node is needed here.
func TestDashboardQueriesParse(t *testing.T) {
	testenv.RequireCommands(t, "promtool")
	root, err := repo.Root()
	if err != nil {
		t.Fatal(err)
	}
	qs, err := loadDashboard(filepath.Join(root, dashboardPath))
	if err != nil {
		t.Fatal(err)
	}
	if len(qs) < 30 {
		t.Fatalf("%s has %d queries, want the 30 or more of its panels", dashboardPath, len(qs))
	}
	for n, where := range seriesNamed(t, qs) {
		if !strings.HasPrefix(n, "mcsd_") && !strings.HasPrefix(n, "workqueue_") && !strings.HasPrefix(n, "rest_client_") && !strings.HasPrefix(n, "leader_election_") {
			t.Errorf("%s names %s, of no family mcsd exports", strings.Join(where, ", "), n)
		}
	}
	var rules []map[string]string
	for i, q := range qs {
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
	if out, err := exec.Command("promtool", "check", "rules", path).CombinedOutput(); err != nil {
		t.Fatalf("promtool check rules refuses a query of the dashboard: %v\n%s\n%s", err, out, data)
	}
	t.Logf("%d queries of %s parse", len(qs), dashboardPath)
}

// seriesNamed returns the series names the queries name, each with the
// queries that name it; a query that names none, or does not scan, fails t.
func seriesNamed(t *testing.T, qs []dashboardQuery) map[string][]string {
	t.Helper()
	named := map[string][]string{}
	for _, q := range qs {
		names, err := metricNames(q.Expr)
		if err != nil {
			t.Errorf("%s: %v", q.Where, err)
		}
		if len(names) == 0 {
			t.Errorf("%s names no series: %s", q.Where, q.Expr)
		}
		for _, n := range names {
			named[n] = append(named[n], q.Where)
		}
	}
	return named
}

// testDashboardSeriesLive holds every query of the chart's Grafana
// dashboard against the live /metrics of every mcsd pod of the clusterset:
// each series a query names is exported by at least one of them. The
// proxier's series of the mode that no node agent runs (/proxyMode) are
// the only ones that may be absent.
func testDashboardSeriesLive(t *testing.T) {
	w := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// A service exported and imported: the exporter's, importer's and
	// proxier's series of what they did are there whatever ran before.
	w.exportedEcho(ctx, t, "dashboard", "echo")
	qs, err := loadDashboard(filepath.Join(w.root, dashboardPath))
	if err != nil {
		t.Fatal(err)
	}
	named := seriesNamed(t, qs)
	if t.Failed() {
		return
	}
	var pods []*mcsdPod
	modes := map[string]bool{}
	for _, m := range w.members {
		ps, err := mcsdPods(ctx, m)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range ps {
			if p.pod.Labels["app.kubernetes.io/component"] != "node-agent" {
				continue
			}
			mode, err := p.get(ctx, p.health+"/proxyMode")
			if err != nil {
				t.Fatal(err)
			}
			modes[strings.TrimSpace(mode)] = true
		}
		pods = append(pods, ps...)
	}
	// Series that only appear once something happens (a histogram's first
	// observation, a vector's first label values) may take a moment after
	// the earlier tests: wait for them, and fail naming those that never
	// appear.
	var missing []string
	exported := map[string]bool{}
	err = wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
		clear(exported)
		for _, p := range pods {
			names, err := p.seriesNames(ctx)
			if err != nil {
				return false, err
			}
			for n := range names {
				exported[n] = true
			}
		}
		missing = missing[:0]
		for n := range named {
			if !exported[n] && !otherModes(n, modes) {
				missing = append(missing, n)
			}
		}
		return len(missing) == 0, nil
	})
	slices.Sort(missing)
	for _, n := range missing {
		t.Errorf("%s is named by %s, but no mcsd pod's /metrics has it", n, strings.Join(named[n], ", "))
	}
	if err != nil && len(missing) == 0 {
		t.Fatal(err)
	}
	t.Logf("figure: %d queries of the dashboard, naming %d series, checked against the live /metrics of %d mcsd pods (%d series names, proxier mode %v): %d missing",
		len(qs), len(named), len(pods), len(exported), slices.Sorted(maps.Keys(modes)), len(missing))
}

// otherModes says whether name is a series of a proxier mode (iptables,
// nftables) that none of modes is: the proxier exports only its own mode's.
func otherModes(name string, modes map[string]bool) bool {
	for _, mode := range []string{"iptables", "nftables"} {
		if strings.HasPrefix(name, "mcsd_proxier_") && strings.Contains(name, "_"+mode+"_") && !modes[mode] {
			return true
		}
	}
	return false
}
