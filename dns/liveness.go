package dns

import "github.com/mcsd-io/mcsd/mcsslice"

// SetGoneClusters stops serving the endpoints of the given clusters (their
// broker Lease expired, as the liveness ConfigMap says) and serves again
// those of clusters no longer in the set. Their EndpointSlices stay as
// they are until the importer tidies them up.
//
// Only services whose answers hold endpoint addresses are republished now:
// headless ones, and ClusterSetIP ones without ClusterSetIPs. The answers
// of a service with ClusterSetIPs do not change, so at 10,000 services a
// cluster's death costs the few that do; the others catch up on their next
// change (the importer's cleanup of their slices, at the latest), and until
// then only the ready-endpoint count lags.
func (x *Index) SetGoneClusters(gone mcsslice.GoneClusters) {
	x.mu.Lock()
	defer x.mu.Unlock()
	changed := gone.Changed(x.gone)
	x.gone = gone
	if changed.Len() == 0 {
		return
	}
	republished := 0
	for key, bySlice := range x.slices {
		if imp := x.imports[key]; imp != nil && !imp.headless && len(imp.vips) > 0 {
			continue
		}
		for _, st := range bySlice {
			if changed.Has(st.cluster) {
				x.publish(key)
				republished++
				break
			}
		}
	}
	x.logger.Info("Serving the endpoints of live clusters only", "goneClusters", gone.String(), "servicesRepublished", republished)
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
