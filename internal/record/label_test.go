package record

import (
	"testing"

	"k8s.io/apimachinery/pkg/labels"
)

func TestLabelsAndSelectors(t *testing.T) {
	cart := labels.Set(Labels("east", "shop", "cart"))
	cartWest := labels.Set(Labels("west", "shop", "cart"))
	cartElsewhere := labels.Set(Labels("east", "staging", "cart"))
	till := labels.Set(Labels("east", "shop", "till"))

	t.Run("the service selector finds every cluster's record of one service and no other", func(t *testing.T) {
		s := ServiceSelector("shop", "cart")
		if !s.Matches(cart) || !s.Matches(cartWest) {
			t.Error("misses a record of shop/cart")
		}
		if s.Matches(cartElsewhere) || s.Matches(till) {
			t.Error("matches a record of another service")
		}
	})

	t.Run("the cluster service selector finds one cluster's objects of one service", func(t *testing.T) {
		s := ClusterServiceSelector("east", "shop", "cart")
		if !s.Matches(cart) || s.Matches(cartWest) || s.Matches(till) {
			t.Errorf("selector %s matches the wrong objects", s)
		}
	})

	t.Run("the cluster selector finds everything one cluster wrote", func(t *testing.T) {
		s := ClusterSelector("east")
		if !s.Matches(cart) || !s.Matches(till) || !s.Matches(labels.Set(LeaseLabels("east"))) || s.Matches(cartWest) {
			t.Errorf("selector %s matches the wrong objects", s)
		}
	})

	t.Run("broker endpoint slices carry the record labels and mcsd's manager, never kubernetes.io/service-name", func(t *testing.T) {
		l := EndpointSliceLabels("east", "shop", "cart")
		if !ClusterServiceSelector("east", "shop", "cart").Matches(labels.Set(l)) {
			t.Error("slice labels do not match the cluster service selector")
		}
		if l[LabelManagedBy] != EndpointSliceManager || EndpointSliceManager == "endpointslice-controller.k8s.io" {
			t.Errorf("managed-by = %q", l[LabelManagedBy])
		}
		if _, ok := l["kubernetes.io/service-name"]; ok {
			t.Error("slice labels have kubernetes.io/service-name")
		}
	})

	t.Run("every object names its source cluster, as the broker's admission policy requires", func(t *testing.T) {
		for _, l := range []map[string]string{Labels("east", "shop", "cart"), EndpointSliceLabels("east", "shop", "cart"), LeaseLabels("east")} {
			if l["multicluster.kubernetes.io/source-cluster"] != "east" {
				t.Errorf("labels %v do not name the source cluster", l)
			}
		}
	})
}
