package scale

import (
	"net/netip"
	"testing"
)

func TestEveryClusterHasEndpointsOfItsOwn(t *testing.T) {
	clusterSetIPs := netip.MustParsePrefix("243.0.0.0/8")
	seen := map[netip.Prefix]int{}
	for ci := range maxClusters {
		first, last := endpointOf(ci, 0), endpointOf(ci, 250*256-1)
		p := netip.PrefixFrom(first, 16).Masked()
		if !p.Contains(last) {
			t.Fatalf("cluster %d: endpoints %s and %s are not in one /16", ci, first, last)
		}
		if other, ok := seen[p]; ok {
			t.Fatalf("clusters %d and %d share %s", other, ci, p)
		}
		seen[p] = ci
		if clusterSetIPs.Contains(first) || first.IsLoopback() || first.IsLinkLocalUnicast() || first.IsUnspecified() {
			t.Fatalf("cluster %d: %s is not an address an endpoint may have here", ci, first)
		}
	}
	if _, err := parseScenarios("100x1000x1"); err != nil {
		t.Fatal(err)
	}
	if _, err := parseScenarios("400x1000x1"); err == nil {
		t.Fatal("400 clusters accepted")
	}
}
