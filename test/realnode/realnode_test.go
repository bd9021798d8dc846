package realnode

import "testing"

// TestRealNodes runs every real-node test on one installation, in an order
// that matters: the install first (its figures), then what only observes or
// adds, then what restarts mcsd, and the uninstall last. A single one runs
// with -run 'TestRealNodes/<name>'; the install happens first in any case.
func TestRealNodes(t *testing.T) {
	for _, tc := range []struct {
		name string
		run  func(*testing.T)
	}{
		{"install", testInstall},
		{"conformance", testConformance},
		{"resolvable means reachable on every node", testResolvableMeansReachableOnEveryNode},
		{"diagnose", testDiagnose},
		{"diagnose pod reachability", testDiagnoseReachability},
		{"gather", testGather},
		{"verify", testVerify},
		{"dashboard series are live", testDashboardSeriesLive},
		{"prometheus", testPrometheus},
		{"join without install, mcsd installed by Helm in another namespace", testJoinWithoutInstall},
		{"mcsd killed on a node", testMCSDPodKilled},
		{"leader failover", testLeaderFailover},
		{"rolling update", testRollingUpdate},
		{"upgrade from the previous commit", testUpgrade},
		{"uninstall", testUninstall},
	} {
		t.Run(tc.name, tc.run)
	}
}
