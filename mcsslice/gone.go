package mcsslice

import (
	"maps"
	"slices"
	"strings"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
)

// GoneClusters is what a data plane withholds: the clusters the liveness
// ConfigMap (package liveness) says are gone, whose endpoints it must not
// serve while their EndpointSlices wait for the importer to tidy them up.
// It is the one place a gone cluster's endpoints are filtered, for mcsd's
// DNS server and its proxier alike. Cluster IDs are compared in lower case: an EndpointSlice's
// source-cluster label and the ConfigMap's key of one cluster may differ in
// case, and DNS names do not tell them apart. A GoneClusters is immutable.
type GoneClusters struct {
	set sets.Set[string]
}

// NewGoneClusters returns the set of the given clusters.
func NewGoneClusters(clusters ...string) GoneClusters {
	g := GoneClusters{set: sets.New[string]()}
	for _, c := range clusters {
		g.set.Insert(strings.ToLower(c))
	}
	return g
}

// Has says whether cluster is gone.
func (g GoneClusters) Has(cluster string) bool {
	return g.set.Len() > 0 && g.set.Has(strings.ToLower(cluster))
}

// Len is the number of gone clusters.
func (g GoneClusters) Len() int { return g.set.Len() }

// Changed returns the clusters that are gone in g but not in before, or the
// other way round: those whose endpoints a data plane serves again or stops
// serving.
func (g GoneClusters) Changed(before GoneClusters) GoneClusters {
	if g.set == nil {
		g.set = sets.New[string]()
	}
	if before.set == nil {
		before.set = sets.New[string]()
	}
	return GoneClusters{set: g.set.SymmetricDifference(before.set)}
}

// Withhold returns s as a data plane serves it: without endpoints when its
// source cluster is gone, else s itself. s is never modified.
func (g GoneClusters) Withhold(s *discoveryv1.EndpointSlice) *discoveryv1.EndpointSlice {
	if !g.Has(s.Labels[mcsv1beta1.LabelSourceCluster]) {
		return s
	}
	empty := *s
	empty.Endpoints = nil
	return &empty
}

// String says which clusters are gone, for logs: "east, west" or "none".
func (g GoneClusters) String() string {
	if g.set.Len() == 0 {
		return "none"
	}
	return strings.Join(slices.Sorted(maps.Keys(g.set)), ", ")
}
