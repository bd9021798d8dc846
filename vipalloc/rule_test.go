package vipalloc

import (
	"net/netip"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

func TestRuleAdmitsOwnersAndCopiesOfTheSameServiceOnly(t *testing.T) {
	var claims []Claim
	for _, cm := range []*corev1.ConfigMap{claimObject("east", "243.1.0.0/16", 10), claimObject("west", "243.2.0.0/16", 20)} {
		c, err := ParseClaim(cm)
		if err != nil {
			t.Fatal(err)
		}
		claims = append(claims, c)
	}
	rule := Rule{ClusterSet: []netip.Prefix{netip.MustParsePrefix("243.0.0.0/8")}, Owners: Owners(claims)}
	t0 := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	hold := func(cluster, service string, age int) Holding {
		return Holding{Cluster: cluster, Service: service, Created: t0.Add(time.Duration(age) * time.Minute)}
	}
	vip := netip.MustParseAddr("243.1.0.5") // in east's block
	for _, tc := range []struct {
		name      string
		vip       netip.Addr
		h         Holding
		holders   []Holding
		exporters []string
		want      string
	}{
		{"outside the clusterset range", netip.MustParseAddr("169.254.169.254"), hold("east", "a/web", 0), nil, nil, ReasonOutsideRange},
		{"in no claimed block", netip.MustParseAddr("243.9.0.1"), hold("east", "a/web", 0), nil, nil, ReasonNotOwned},
		{"the owner's own", vip, hold("east", "a/web", 0), []Holding{hold("east", "a/web", 0)}, []string{"east"}, ""},
		{"a copy of what the owner gave the same service", vip, hold("west", "a/web", 1),
			[]Holding{hold("east", "a/web", 0), hold("west", "a/web", 1)}, []string{"east", "west"}, ""},
		{"the owner's address for another service", vip, hold("west", "a/steal", 1),
			[]Holding{hold("east", "a/web", 5), hold("west", "a/steal", 1)}, []string{"west"}, ReasonNotOwned},
		{"an address of the owner's block the owner does not use", vip, hold("west", "a/steal", 1),
			[]Holding{hold("west", "a/steal", 1)}, []string{"west"}, ""},
		{"an address of the owner's block for a service the owner exports with another VIP", vip, hold("west", "a/web", 0),
			[]Holding{hold("west", "a/web", 0)}, []string{"east", "west"}, ReasonNotOwned},
		{"a copy that outlived its allocator, every holder agreeing", vip, hold("west", "a/web", 1),
			[]Holding{hold("west", "a/web", 1), hold("north", "a/web", 2)}, []string{"west", "north"}, ""},
		{"a copy that outlived its allocator, another service holding it too", vip, hold("west", "a/web", 1),
			[]Holding{hold("west", "a/web", 1), hold("north", "a/steal", 0)}, []string{"west"}, ReasonNotOwned},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, _ := rule.Admit(tc.vip, tc.h, tc.holders, tc.exporters)
			if got != tc.want {
				t.Fatalf("Admit = %q, want %q", got, tc.want)
			}
		})
	}
}
