package clustersetip

import (
	"math/big"
	"net/netip"
	"testing"
)

func TestNthBlock(t *testing.T) {
	for _, tc := range []struct {
		parent string
		bits   int
		i      int64
		want   string
	}{
		{"243.0.0.0/8", 16, 0, "243.0.0.0/16"},
		{"243.0.0.0/8", 16, 5, "243.5.0.0/16"},
		{"243.0.0.0/8", 16, 255, "243.255.0.0/16"},
		{"fd7a:6d63:7364::/48", 64, 3, "fd7a:6d63:7364:3::/64"},
	} {
		got := nthBlock(netip.MustParsePrefix(tc.parent), tc.bits, big.NewInt(tc.i))
		if got.String() != tc.want {
			t.Errorf("nthBlock(%s, /%d, %d) = %s, want %s", tc.parent, tc.bits, tc.i, got, tc.want)
		}
	}
}

func TestClaimNamesAreValidAndDistinct(t *testing.T) {
	names := map[string]bool{}
	for _, p := range []string{"243.1.0.0/16", "243.1.0.0/24", "fd7a:6d63:7364:1::/64", "fd7a:6d63:7364:10::/64"} {
		n := ClaimName(netip.MustParsePrefix(p))
		if names[n] {
			t.Fatalf("duplicate claim name %s", n)
		}
		names[n] = true
	}
	if got := ClaimName(netip.MustParsePrefix("243.1.0.0/16")); got != "clustersetip-243-1-0-0-16" {
		t.Fatalf("ClaimName = %s", got)
	}
}
