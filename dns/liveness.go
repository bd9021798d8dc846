package dns

import (
	"strings"

	"k8s.io/apimachinery/pkg/util/sets"
)

// SetGoneClusters stops serving the endpoints of the given clusters (their
// broker Lease expired, as the liveness ConfigMap says) and serves again
// those of clusters no longer in the set. Only the services with a slice of
// a cluster that changed are republished; their EndpointSlices stay as
// they are until the importer tidies them up.
func (x *Index) SetGoneClusters(gone sets.Set[string]) {
	lower := sets.New[string]()
	for c := range gone {
		lower.Insert(strings.ToLower(c))
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	changed := lower.SymmetricDifference(x.gone)
	x.gone = lower
	if changed.Len() == 0 {
		return
	}
	republished := 0
	for key, bySlice := range x.slices {
		for _, st := range bySlice {
			if changed.Has(st.cluster) {
				x.publish(key)
				republished++
				break
			}
		}
	}
	x.logger.Info("Serving the endpoints of live clusters only", "goneClusters", sets.List(lower), "servicesRepublished", republished)
}

// servedSlices are the slices of a service whose cluster is not gone.
// x.mu must be held.
func (x *Index) servedSlices(key serviceKey) map[string]*sliceState {
	all := x.slices[key]
	if x.gone.Len() == 0 {
		return all
	}
	served := make(map[string]*sliceState, len(all))
	for name, st := range all {
		if !x.gone.Has(st.cluster) {
			served[name] = st
		}
	}
	return served
}
