package mcsslice

import (
	"strings"
	"testing"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

func TestName(t *testing.T) {
	if got := Name("cart", "east", discoveryv1.AddressTypeIPv6, 2); got != "cart.east.ipv6-2" {
		t.Fatalf("SliceName = %q", got)
	}
	// Names joined with dashes could collide ("a-b"+"c" vs "a"+"b-c");
	// dots cannot appear in either part.
	if Name("a-b", "c", discoveryv1.AddressTypeIPv4, 0) == Name("a", "b-c", discoveryv1.AddressTypeIPv4, 0) {
		t.Fatal("different services and clusters share a slice name")
	}
	odd := Name("Not_A_Label", "east", discoveryv1.AddressTypeIPv4, 0)
	if errs := validation.IsDNS1123Subdomain(odd); len(errs) > 0 || strings.Contains(odd, ".") {
		t.Fatalf("fallback name %q: %v", odd, errs)
	}
	if odd == Name("not-a-label", "east", discoveryv1.AddressTypeIPv4, 0) {
		t.Fatal("the hashed name equals a joined one")
	}
}
