package proxier

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	"sigs.k8s.io/knftables"
)

func TestCheckVersions(t *testing.T) {
	for _, tc := range []struct {
		kernel, nft string
		ok          bool
	}{
		{"6.18.0-1-amd64", "nftables v1.0.6 (Lester Gooch #5)", true},
		{"5.13.0", "nftables v1.0.1 (Fearless Fosdick #3)", true},
		{"5.10.0-28-amd64", "nftables v1.0.6 (Lester Gooch #5)", false},
		{"6.1.0", "nftables v0.9.8 (E.D.S.)", false},
		{"6.1.0", "not a version", false},
	} {
		err := checkVersions(tc.kernel, tc.nft)
		if (err == nil) != tc.ok {
			t.Errorf("kernel %q, nft %q: error %v, want ok=%v", tc.kernel, tc.nft, err, tc.ok)
		}
	}
}

func TestCleanupNFTables(t *testing.T) {
	t.Run("deletes the table", func(t *testing.T) {
		f := newFixture(t, v1.IPv4Protocol)
		f.start(append(webSlices(), webImport())...)
		if err := cleanupNFTables(t.Context(), f.nft); err != nil {
			t.Fatal(err)
		}
		if f.nft.Table != nil {
			t.Errorf("the table is still there:\n%s", f.nft.Dump())
		}
	})
	t.Run("a missing table is not an error", func(t *testing.T) {
		if err := cleanupNFTables(t.Context(), knftables.NewFake(knftables.IPv6Family, TableName)); err != nil {
			t.Error(err)
		}
	})
}
