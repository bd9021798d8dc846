package proxier

import (
	"slices"
	"strings"

	"k8s.io/klog/v2"
	"sigs.k8s.io/knftables"
)

// elementStore is the proxier's memory of what it committed to the static
// maps and sets, so that a sync changes only the elements that differ and
// never has to list them from the kernel. An element can be wanted by more
// than one service (two imports selecting the same pods share hairpin
// entries), so each one is reference-counted.
type elementStore struct {
	logger  klog.Logger
	entries map[string]map[string]storedElement // container -> key -> element
	// perCommand is how many elements one "add element" or "delete
	// element" command carries. nft 1.0.6 spends about as much on a
	// command as on the elements in it, so at tens of thousands of imports
	// batching them halves a full load.
	perCommand int
	// pending holds the element operations of the transaction being
	// built, until write: deletions, then additions, per container, in
	// chunks of perCommand, so that a full load of hundreds of thousands
	// grows no slice by copying it.
	deletes, adds map[string][][]element
}

type storedElement struct {
	value string
	refs  int
}

func newElementStore(logger klog.Logger, perCommand int) *elementStore {
	s := &elementStore{logger: logger, perCommand: perCommand}
	s.reset()
	return s
}

// reset forgets everything; the caller flushes the containers in the same
// transaction. Each container's map starts with the room it took before,
// as a rewrite puts back about as many elements.
func (s *elementStore) reset() {
	before := s.entries
	s.entries = map[string]map[string]storedElement{}
	for _, c := range staticContainers {
		s.entries[c] = make(map[string]storedElement, len(before[c]))
	}
	s.deletes, s.adds = map[string][][]element{}, map[string][][]element{}
}

// queue appends e to the chunked operations of its container.
func (s *elementStore) queue(ops map[string][][]element, e element) {
	chunks := ops[e.container]
	if n := len(chunks); n == 0 || len(chunks[n-1]) == s.perCommand {
		ops[e.container] = append(chunks, append(make([]element, 0, s.perCommand), e))
		return
	}
	chunks[len(chunks)-1] = append(chunks[len(chunks)-1], e)
}

// acquire adds a reference to e, adding it when it is new. A key that
// exists with another value is deleted and added again: the kernel refuses
// to add an existing map key with a new value.
func (s *elementStore) acquire(e element) {
	entries := s.entries[e.container]
	stored, ok := entries[e.key]
	if !ok {
		entries[e.key] = storedElement{value: e.value, refs: 1}
		s.queue(s.adds, e)
		return
	}
	stored.refs++
	if stored.value != e.value {
		// Two services want one map key with different values; the
		// proxier gives each ClusterSetIP to one service, so this is a
		// bug. The last one wins.
		s.logger.Error(nil, "Two services claim one nftables map key", "map", e.container, "key", e.key,
			"value", stored.value, "newValue", e.value)
		s.queue(s.deletes, element{container: e.container, key: e.key})
		s.queue(s.adds, e)
		stored.value = e.value
	}
	entries[e.key] = stored
}

// release drops a reference to e, deleting it with the last one.
func (s *elementStore) release(e element) {
	entries := s.entries[e.container]
	stored, ok := entries[e.key]
	if !ok {
		return
	}
	stored.refs--
	if stored.refs > 0 {
		entries[e.key] = stored
		return
	}
	delete(entries, e.key)
	s.queue(s.deletes, element{container: e.container, key: e.key})
}

// write adds the pending operations to tx: every deletion before every
// addition, so that a changed map value is a delete followed by an add. No
// key is added and then deleted in one sync (a key is only released by a
// service whose committed state had it), so nothing needs the opposite
// order.
func (s *elementStore) write(tx *knftables.Transaction) {
	for _, c := range staticContainers {
		for _, batch := range s.deletes[c] {
			tx.Delete(batchObject(batch, false))
		}
	}
	for _, c := range staticContainers {
		for _, batch := range s.adds[c] {
			tx.Add(batchObject(batch, true))
		}
	}
	clear(s.deletes)
	clear(s.adds)
}

// batchObject is one knftables element that nft reads as all of batch:
// knftables writes an element as "{ <key> : <value> }", so a key of
// "k1 : v1, k2 : v2, k3" with the value v3 reads as three elements.
func batchObject(batch []element, withValues bool) *knftables.Element {
	if len(batch) == 1 {
		e := batch[0]
		if !withValues {
			e.value = ""
		}
		return e.object()
	}
	var b strings.Builder
	size := 0
	for _, e := range batch {
		size += len(e.key) + len(" : ") + len(e.value) + len(", ")
	}
	b.Grow(size)
	last := batch[len(batch)-1]
	for _, e := range batch[:len(batch)-1] {
		b.WriteString(e.key)
		if withValues && e.value != "" {
			b.WriteString(" : ")
			b.WriteString(e.value)
		}
		b.WriteString(", ")
	}
	b.WriteString(last.key)
	obj := &knftables.Element{Key: []string{b.String()}}
	if isMap(last.container) {
		obj.Map = last.container
		if withValues {
			obj.Value = []string{last.value}
		}
	} else {
		obj.Set = last.container
	}
	return obj
}

// diff moves one service's elements from old to new: what is gone is
// released, then what is new acquired. The operations wait for write.
func (s *elementStore) diff(old, new []element) {
	// A render is deterministic: a service that gained or lost nothing
	// has the same elements in the same order, and a new one has no old
	// ones. Only the others need the maps below.
	if slices.Equal(old, new) {
		return
	}
	if len(old) == 0 {
		for _, e := range new {
			s.acquire(e)
		}
		return
	}
	type id struct{ container, key string }
	wanted := make(map[id]string, len(new))
	for _, e := range new {
		wanted[id{e.container, e.key}] = e.value
	}
	had := make(map[id]string, len(old))
	for _, e := range old {
		had[id{e.container, e.key}] = e.value
		if v, ok := wanted[id{e.container, e.key}]; !ok || v != e.value {
			s.release(e)
		}
	}
	for _, e := range new {
		if v, ok := had[id{e.container, e.key}]; !ok || v != e.value {
			s.acquire(e)
		}
	}
}

// count is the number of elements of container whose value is value.
func (s *elementStore) count(container, value string) int {
	n := 0
	for _, e := range s.entries[container] {
		if e.value == value {
			n++
		}
	}
	return n
}

// len is the number of elements in container.
func (s *elementStore) len(container string) int { return len(s.entries[container]) }

// object is e as a knftables element.
func (e element) object() *knftables.Element {
	obj := &knftables.Element{Key: strings.Split(e.key, " . ")}
	if isMap(e.container) {
		obj.Map = e.container
		obj.Value = strings.Split(e.value, " . ")
	} else {
		obj.Set = e.container
	}
	return obj
}

// isMap says whether a static container is a map (its elements have values).
func isMap(container string) bool {
	return container == serviceIPsMap || container == noEndpointServicesMap || strings.HasPrefix(container, backendsMapPrefix)
}
