package mcsslice

import (
	"testing"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
)

func TestGoneClustersCompareIDsInLowerCase(t *testing.T) {
	gone := NewGoneClusters("East")
	if !gone.Has("east") || !gone.Has("EAST") || gone.Has("west") {
		t.Fatalf("%v: Has(east)=%v Has(EAST)=%v Has(west)=%v", gone, gone.Has("east"), gone.Has("EAST"), gone.Has("west"))
	}
	if changed := NewGoneClusters("east", "north").Changed(gone); changed.String() != "north" {
		t.Fatalf("changed %v, want north only", changed)
	}
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{mcsv1beta1.LabelSourceCluster: "EAST"}},
		Endpoints:  []discoveryv1.Endpoint{{Addresses: []string{"10.1.0.1"}}},
	}
	if got := gone.Withhold(slice); len(got.Endpoints) != 0 || len(slice.Endpoints) != 1 {
		t.Fatalf("withheld %v from %v: want no endpoints, the original untouched", got.Endpoints, slice.Endpoints)
	}
	if got := NewGoneClusters().Withhold(slice); got != slice {
		t.Fatal("a slice of a live cluster is not passed as it is")
	}
}
