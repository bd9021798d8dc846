package proxier

import (
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
	entries map[string]map[string]*storedElement // container -> key -> element
}

type storedElement struct {
	value string
	refs  int
}

func newElementStore(logger klog.Logger) *elementStore {
	s := &elementStore{logger: logger}
	s.reset()
	return s
}

// reset forgets everything; the caller flushes the containers in the same
// transaction.
func (s *elementStore) reset() {
	s.entries = map[string]map[string]*storedElement{}
	for _, c := range staticContainers {
		s.entries[c] = map[string]*storedElement{}
	}
}

// acquire adds a reference to e, adding it to tx when it is new. A key that
// exists with another value is deleted and added again: the kernel refuses
// to add an existing map key with a new value.
func (s *elementStore) acquire(tx *knftables.Transaction, e element) {
	stored := s.entries[e.container][e.key]
	if stored == nil {
		s.entries[e.container][e.key] = &storedElement{value: e.value, refs: 1}
		tx.Add(e.object())
		return
	}
	stored.refs++
	if stored.value != e.value {
		// Two services want one map key with different values; the
		// proxier gives each ClusterSetIP to one service, so this is a
		// bug. The last one wins.
		s.logger.Error(nil, "Two services claim one nftables map key", "map", e.container, "key", e.key,
			"value", stored.value, "newValue", e.value)
		tx.Delete(element{container: e.container, key: e.key, value: stored.value}.object())
		tx.Add(e.object())
		stored.value = e.value
	}
}

// release drops a reference to e, deleting it in tx with the last one.
func (s *elementStore) release(tx *knftables.Transaction, e element) {
	stored := s.entries[e.container][e.key]
	if stored == nil {
		return
	}
	stored.refs--
	if stored.refs > 0 {
		return
	}
	delete(s.entries[e.container], e.key)
	tx.Delete(element{container: e.container, key: e.key, value: stored.value}.object())
}

// diff moves one service's elements from old to new: what is gone is
// released, then what is new acquired, so that a changed value becomes a
// delete followed by an add.
func (s *elementStore) diff(tx *knftables.Transaction, old, new []element) {
	type id struct{ container, key string }
	wanted := make(map[id]string, len(new))
	for _, e := range new {
		wanted[id{e.container, e.key}] = e.value
	}
	had := make(map[id]string, len(old))
	for _, e := range old {
		had[id{e.container, e.key}] = e.value
		if v, ok := wanted[id{e.container, e.key}]; !ok || v != e.value {
			s.release(tx, e)
		}
	}
	for _, e := range new {
		if v, ok := had[id{e.container, e.key}]; !ok || v != e.value {
			s.acquire(tx, e)
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
	switch e.container {
	case serviceIPsMap, noEndpointServicesMap, backendsMap:
		obj.Map = e.container
		obj.Value = strings.Split(e.value, " . ")
	default:
		obj.Set = e.container
	}
	return obj
}
