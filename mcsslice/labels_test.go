package mcsslice

import (
	"strings"
	"testing"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/mcsd-io/mcsd/internal/record"
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

// A member that is also the broker holds every member's broker slices in
// its member namespaces; its data plane must not take them for imports.
func TestSelectorsLeaveOutTheBrokersSlices(t *testing.T) {
	importer := labels.Set(Labels("cart", "east"))
	broker := labels.Set(record.EndpointSliceLabels("east", "shop", "cart"))
	other := labels.Set{mcsv1beta1.LabelServiceName: "cart", mcsv1beta1.LabelSourceCluster: "east", discoveryv1.LabelManagedBy: "someone-else"}
	for _, tc := range []struct {
		selector string
		set      labels.Set
		want     bool
	}{
		{Selector, importer, true},
		{Selector, other, true},
		{Selector, broker, false},
		{ImporterSelector, importer, true},
		{ImporterSelector, other, false},
		{ImporterSelector, broker, false},
	} {
		sel, err := labels.Parse(tc.selector)
		if err != nil {
			t.Fatal(err)
		}
		if got := sel.Matches(tc.set); got != tc.want {
			t.Errorf("%q matches %v: %v, want %v", tc.selector, tc.set, got, tc.want)
		}
	}
}
