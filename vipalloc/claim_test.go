package vipalloc

import (
	"math/big"
	"net/netip"
	"strconv"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
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

func claimObject(cluster, block string, rev int) *corev1.ConfigMap {
	p := netip.MustParsePrefix(block)
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{
			Name:            ClaimName(cluster, familyOf(p)),
			ResourceVersion: strconv.Itoa(rev),
			Labels:          map[string]string{LabelClaim: "", mcsv1beta1.LabelSourceCluster: cluster},
		},
		Data: map[string]string{ClaimKey: block},
	}
}

func TestClaimNamesCarryTheClusterAndFamily(t *testing.T) {
	if got := ClaimName("east", corev1.IPv4Protocol); got != "clustersetip-east-ipv4" {
		t.Fatalf("ClaimName = %s", got)
	}
	if got := ClaimName("east", corev1.IPv6Protocol); got != "clustersetip-east-ipv6" {
		t.Fatalf("ClaimName = %s", got)
	}
}

func TestParseClaimRefusesWhatNoMemberCouldHaveWritten(t *testing.T) {
	if _, err := ParseClaim(claimObject("east", "243.1.0.0/16", 5)); err != nil {
		t.Fatal(err)
	}
	renamed := claimObject("east", "243.1.0.0/16", 5)
	renamed.Name = "clustersetip-west-ipv4"
	unmasked := claimObject("east", "243.1.0.0/16", 5)
	unmasked.Data[ClaimKey] = "243.1.2.0/16"
	unlabelled := claimObject("east", "243.1.0.0/16", 5)
	delete(unlabelled.Labels, mcsv1beta1.LabelSourceCluster)
	wrongFamily := claimObject("east", "243.1.0.0/16", 5)
	wrongFamily.Data[ClaimKey] = "fd7a:6d63:7364:1::/64"
	for name, cm := range map[string]*corev1.ConfigMap{"renamed": renamed, "unmasked": unmasked, "unlabelled": unlabelled, "wrong family": wrongFamily} {
		if _, err := ParseClaim(cm); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestTheClaimStoredFirstOwnsOverlappingAddresses(t *testing.T) {
	var claims []Claim
	for _, cm := range []*corev1.ConfigMap{
		claimObject("late", "243.0.0.0/8", 30), // overlaps both below, stored last
		claimObject("east", "243.1.0.0/16", 10),
		claimObject("west", "243.1.0.0/16", 20), // the same block, stored after east's
		claimObject("north", "243.2.0.0/16", 25),
	} {
		c, err := ParseClaim(cm)
		if err != nil {
			t.Fatal(err)
		}
		claims = append(claims, c)
	}
	owners := Owners(claims)
	for ip, want := range map[string]string{"243.1.0.9": "east", "243.2.3.4": "north", "243.9.0.1": ""} {
		got, ok := OwnerOf(owners, netip.MustParseAddr(ip))
		if got != want || ok != (want != "") {
			t.Errorf("OwnerOf(%s) = %q, %v; want %q", ip, got, ok, want)
		}
	}
}
