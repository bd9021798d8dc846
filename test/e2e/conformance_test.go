// Package e2e runs mcsd end to end: real control planes, the mcsd binary
// in every cluster, pods in network namespaces.
//
// TestConformance is the upstream MCS API conformance suite
// (test/lib/conformance) on this harness: one subtest per upstream spec, named
// with the spec's own text. Pods are the harness's echo pods, DNS is asked
// with a DNS client inside a pod's network namespace (cluster.local names
// of a CoreDNS serving the cluster, from the test process), and
// connections go through the proxier from a pod.
//
// The clusters are dual-stack and the hello Service PreferDualStack, as
// upstream's. The specs upstream runs for each IP family (connectivity, and
// DNS of addresses) run a subtest per family the clusters share, named
// "... for each IP family/IPv4" and ".../IPv6": A or AAAA queries, and
// connections to that family's ClusterSetIP over TCP and UDP.
package e2e

import (
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/mcsd-io/mcsd/test/lib/conformance"
	"github.com/mcsd-io/mcsd/test/lib/harness"
)

// conformanceFamilies are the IP families of the suite's clusters:
// dual-stack, unless MCSD_CONFORMANCE_IP_FAMILIES names others ("IPv4",
// "IPv6" or "IPv6,IPv4", say).
func conformanceFamilies() []corev1.IPFamily {
	v := os.Getenv("MCSD_CONFORMANCE_IP_FAMILIES")
	if v == "" {
		return harness.DualStack
	}
	var out []corev1.IPFamily
	for _, f := range strings.Split(v, ",") {
		out = append(out, corev1.IPFamily(strings.TrimSpace(f)))
	}
	return out
}

func TestConformance(t *testing.T) {
	began := time.Now()
	s := startClusterSetWith(t, harness.Options{Clusters: 2, IPFamilies: conformanceFamilies()})
	t.Logf("clusterset with mcsd in %d clusters ready in %v; IP families %v", len(s.members), time.Since(began).Round(10*time.Millisecond), s.families)
	conformance.Run(t, s.world, conformance.Specs)
	t.Logf("suite done in %v", time.Since(began).Round(10*time.Millisecond))
}
