package proxier

import (
	"net/netip"
	"reflect"
	"sort"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
)

// changeTracker accumulates what the event handlers report between two
// syncs. For each ServiceImport it keeps {previous, current}: previous is
// what the last sync saw, current the latest; a change that is undone before
// the next sync disappears. EndpointSlices are cached per service and per
// slice (applied: what the last sync saw; pending: changes since), so an
// endpoint moving from one slice to another, or a slice whose service label
// changes, is handled, and a slice update that changes nothing the proxier
// uses is dropped.
type changeTracker struct {
	family v1.IPFamily
	// clusterSetCIDRs are the ranges of this family a ClusterSetIP must
	// lie in; empty means any.
	clusterSetCIDRs []netip.Prefix
	clock           clock.PassiveClock
	metrics         *metrics
	logger          klog.Logger

	mu       sync.Mutex
	services map[types.NamespacedName]*serviceChange
	// applied holds each service's slices as of the last checkout.
	applied map[types.NamespacedName]map[string]*sliceInfo
	// pending holds changed slices per service: nil means deleted.
	pending map[types.NamespacedName]map[string]*sliceInfo
	// sliceService remembers the service each known slice belongs to.
	sliceService map[types.NamespacedName]types.NamespacedName
	// triggers holds, per service, when each pending change was made.
	triggers map[types.NamespacedName][]time.Time
}

// serviceChange is a ServiceImport's state before and after the changes
// since the last sync; nil is "absent, or nothing to program".
type serviceChange struct {
	previous, current *serviceInfo
}

// checkout is what one sync takes from the tracker.
type checkout struct {
	// services holds each changed ServiceImport's current state (nil when
	// gone or not programmable).
	services map[types.NamespacedName]*serviceInfo
	// slices holds, for each service whose slices changed, all its slices
	// now, sorted by name.
	slices map[types.NamespacedName][]*sliceInfo
	// triggers holds when the changes were made, per service.
	triggers map[types.NamespacedName][]time.Time
}

func newChangeTracker(family v1.IPFamily, clusterSetCIDRs []netip.Prefix, clk clock.PassiveClock, m *metrics, logger klog.Logger) *changeTracker {
	return &changeTracker{
		family:          family,
		clusterSetCIDRs: clusterSetCIDRs,
		clock:           clk,
		metrics:         m,
		logger:          logger,
		services:        map[types.NamespacedName]*serviceChange{},
		applied:         map[types.NamespacedName]map[string]*sliceInfo{},
		pending:         map[types.NamespacedName]map[string]*sliceInfo{},
		sliceService:    map[types.NamespacedName]types.NamespacedName{},
		triggers:        map[types.NamespacedName][]time.Time{},
	}
}

// serviceUpdate records a ServiceImport event (previous nil: added; current
// nil: deleted) and reports whether a change is now pending for it.
func (t *changeTracker) serviceUpdate(previous, current *mcsv1beta1.ServiceImport) bool {
	obj := current
	if obj == nil {
		obj = previous
	}
	if obj == nil {
		return false
	}
	name := types.NamespacedName{Namespace: obj.Namespace, Name: obj.Name}
	prev, _ := newServiceInfo(previous, t.family, t.clusterSetCIDRs)
	cur, reason := newServiceInfo(current, t.family, t.clusterSetCIDRs)
	if reason == reasonOutsideClusterSet {
		t.metrics.vipsRefused.WithLabelValues(string(t.family)).Inc()
		t.logger.Info("Refusing a ClusterSetIP outside the clusterset CIDRs; the ServiceImport gets no rules", "serviceImport", klog.KObj(current), "ips", current.Spec.IPs, "clusterSetCIDRs", t.clusterSetCIDRs)
	}

	t.mu.Lock()
	defer t.mu.Unlock()
	change, ok := t.services[name]
	if !ok {
		change = &serviceChange{previous: prev}
		t.services[name] = change
	}
	change.current = cur
	pending := !reflect.DeepEqual(change.previous, change.current)
	if pending {
		t.triggers[name] = append(t.triggers[name], t.clock.Now())
		t.metrics.serviceChangesTotal.WithLabelValues(string(t.family)).Inc()
		if cur == nil && current != nil {
			t.logger.V(4).Info("ServiceImport has nothing to program", "serviceImport", klog.KObj(current), "reason", reason)
		}
	} else {
		delete(t.services, name)
	}
	t.metrics.serviceChangesPending.WithLabelValues(string(t.family)).Set(float64(len(t.services)))
	return pending
}

// sliceUpdate records an EndpointSlice event and reports whether a change
// is now pending because of it.
func (t *changeTracker) sliceUpdate(slice *discoveryv1.EndpointSlice, deleted bool) bool {
	if slice == nil {
		return false
	}
	info, service, ok, err := newSliceInfo(slice, t.family)
	if err != nil {
		t.logger.Error(err, "EndpointSlice has an invalid service-ports annotation; its endpoints get no traffic until it is fixed", "endpointSlice", klog.KObj(slice))
	}
	sliceName := types.NamespacedName{Namespace: slice.Namespace, Name: slice.Name}
	trigger := triggerTime(slice)
	if trigger.IsZero() {
		trigger = t.clock.Now()
	}

	t.mu.Lock()
	defer t.mu.Unlock()
	changed := false
	if known, found := t.sliceService[sliceName]; found && (!ok || deleted || known != service) {
		// Gone, or moved to another service: remove it from the old one.
		changed = t.setPending(known, slice.Name, nil, trigger) || changed
		delete(t.sliceService, sliceName)
	}
	if ok && !deleted {
		t.sliceService[sliceName] = service
		changed = t.setPending(service, slice.Name, info, trigger) || changed
	}
	if changed {
		t.metrics.endpointChangesTotal.WithLabelValues(string(t.family)).Inc()
	}
	t.metrics.endpointChangesPending.WithLabelValues(string(t.family)).Set(float64(len(t.pending)))
	return changed
}

// setPending records a slice's new state (nil: deleted) for service and
// reports whether that changed anything pending.
func (t *changeTracker) setPending(service types.NamespacedName, slice string, info *sliceInfo, trigger time.Time) bool {
	pending := t.pending[service]
	old, wasPending := pending[slice]
	if !wasPending {
		old = t.applied[service][slice]
	}
	if reflect.DeepEqual(old, info) {
		return false
	}
	if reflect.DeepEqual(t.applied[service][slice], info) {
		// Back to what the last sync saw.
		delete(pending, slice)
		if len(pending) == 0 {
			delete(t.pending, service)
			return false
		}
		return true
	}
	if pending == nil {
		pending = map[string]*sliceInfo{}
		t.pending[service] = pending
	}
	pending[slice] = info
	t.triggers[service] = append(t.triggers[service], trigger)
	return true
}

// pendingCount is how many services have changes waiting.
func (t *changeTracker) pendingCount() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := len(t.services)
	for name := range t.pending {
		if _, ok := t.services[name]; !ok {
			n++
		}
	}
	return n
}

// checkout hands the pending changes to a sync and starts a new round.
func (t *changeTracker) checkout() checkout {
	t.mu.Lock()
	defer t.mu.Unlock()
	c := checkout{
		services: make(map[types.NamespacedName]*serviceInfo, len(t.services)),
		slices:   make(map[types.NamespacedName][]*sliceInfo, len(t.pending)),
		triggers: make(map[types.NamespacedName][]time.Time, len(t.triggers)),
	}
	for name, change := range t.services {
		c.services[name] = change.current
	}
	for service, changes := range t.pending {
		applied := t.applied[service]
		if applied == nil {
			applied = map[string]*sliceInfo{}
			t.applied[service] = applied
		}
		for slice, info := range changes {
			if info == nil {
				delete(applied, slice)
			} else {
				applied[slice] = info
			}
		}
		if len(applied) == 0 {
			delete(t.applied, service)
		}
		c.slices[service] = sortedSlices(applied)
	}
	// Changes that were undone before this sync have nothing to report.
	for service, times := range t.triggers {
		_, svcChanged := c.services[service]
		_, slicesChanged := c.slices[service]
		if svcChanged || slicesChanged {
			c.triggers[service] = times
		}
	}
	t.services = map[types.NamespacedName]*serviceChange{}
	t.pending = map[types.NamespacedName]map[string]*sliceInfo{}
	t.triggers = map[types.NamespacedName][]time.Time{}
	t.metrics.serviceChangesPending.WithLabelValues(string(t.family)).Set(0)
	t.metrics.endpointChangesPending.WithLabelValues(string(t.family)).Set(0)
	return c
}

func sortedSlices(slices map[string]*sliceInfo) []*sliceInfo {
	if len(slices) == 0 {
		return nil
	}
	out := make([]*sliceInfo, 0, len(slices))
	for _, s := range slices {
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}
