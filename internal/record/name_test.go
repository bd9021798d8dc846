package record

import (
	"strings"
	"testing"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

func TestNames(t *testing.T) {
	long := strings.Repeat("x", 63)

	t.Run("a record is named namespace.name.cluster", func(t *testing.T) {
		if got := Name("east", "shop", "cart"); got != "shop.cart.east" {
			t.Fatalf("Name = %q, want shop.cart.east", got)
		}
	})

	t.Run("a record of the longest cluster ID, namespace and name is a valid name", func(t *testing.T) {
		n := Name(long, long, long)
		if errs := validation.IsDNS1123Subdomain(n); len(errs) > 0 {
			t.Fatalf("Name of 63-character parts = %q: %v", n, errs)
		}
		if len(n) != 191 {
			t.Fatalf("len(Name) = %d, want 191", len(n))
		}
	})

	t.Run("records of different services or clusters never share a name", func(t *testing.T) {
		// Dashes are legal inside every part: a dash-joined name would
		// make these three collide.
		triples := [][3]string{{"a-b", "c", "d"}, {"a", "b-c", "d"}, {"a", "b", "c-d"}, {"d", "c", "a-b"}}
		seen := map[string][3]string{}
		for _, tr := range triples {
			n := Name(tr[0], tr[1], tr[2])
			if prev, ok := seen[n]; ok {
				t.Fatalf("%v and %v are both named %q", prev, tr, n)
			}
			seen[n] = tr
		}
	})

	t.Run("a part that is not a DNS label gives a valid hashed name without dots", func(t *testing.T) {
		for _, tr := range [][3]string{
			{"East", "shop", "cart"},
			{"east", "shop", strings.Repeat("y", 300)},
			{"east", "a.b", "cart"},
			{"", "", ""},
			{"---", "_", "."},
		} {
			n := Name(tr[0], tr[1], tr[2])
			if errs := validation.IsDNS1123Subdomain(n); len(errs) > 0 {
				t.Errorf("Name%v = %q: %v", tr, n, errs)
			}
			if strings.Contains(n, ".") {
				t.Errorf("Name%v = %q has a dot, so it could equal a plain name", tr, n)
			}
			if n != Name(tr[0], tr[1], tr[2]) {
				t.Errorf("Name%v is not deterministic", tr)
			}
		}
		if Name("East", "shop", "cart") == Name("east", "Shop", "cart") {
			t.Error("two different invalid triples share a hashed name")
		}
	})

	t.Run("endpoint slices are named per address family and index", func(t *testing.T) {
		if got := EndpointSliceName("east", "shop", "cart", discoveryv1.AddressTypeIPv4, 0); got != "shop.cart.east.ipv4-0" {
			t.Fatalf("IPv4 slice = %q", got)
		}
		if got := EndpointSliceName("east", "shop", "cart", discoveryv1.AddressTypeIPv6, 2); got != "shop.cart.east.ipv6-2" {
			t.Fatalf("third IPv6 slice = %q", got)
		}
		n := EndpointSliceName(long, long, long, discoveryv1.AddressTypeIPv6, 99999)
		if errs := validation.IsDNS1123Subdomain(n); len(errs) > 0 {
			t.Fatalf("slice name of 63-character parts = %q: %v", n, errs)
		}
	})

	t.Run("a cluster's lease is named for the cluster", func(t *testing.T) {
		if got := LeaseName("east"); got != "cluster-east" {
			t.Fatalf("LeaseName = %q", got)
		}
		if errs := validation.IsDNS1123Subdomain(LeaseName("Not A Label")); len(errs) > 0 {
			t.Fatalf("LeaseName of an invalid ID: %v", errs)
		}
	})
}
