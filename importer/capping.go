package importer

import (
	"cmp"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/mcsd-io/mcsd/internal/cacheobj"
	"github.com/mcsd-io/mcsd/internal/record"
)

// DefaultMaxServicesPerCluster is how many records one cluster may
// contribute when Config.MaxServicesPerCluster is not set.
const DefaultMaxServicesPerCluster = 20000

// capReevaluateAfter is how long after a change of an over-cap cluster's
// records its cut is computed again: at most once per this period, so a
// flood of records costs one sort a period, not one per record.
const capReevaluateAfter = time.Second

// recordKey orders one cluster's records for the cap: by the broker's
// creationTimestamp, then name. The oldest are kept, so a flood of new
// records cannot displace the services a cluster already exports.
type recordKey struct {
	created time.Time
	name    string
}

func compareRecordKeys(a, b recordKey) int {
	return cmp.Or(a.created.Compare(b.created), cmp.Compare(a.name, b.name))
}

func keyOf(r *record.Cached) recordKey {
	return recordKey{created: r.CreationTimestamp.Time, name: r.Name}
}

// capBook caps the records each cluster contributes. Every record of a
// cluster is counted as it arrives; while a cluster has more than max, only
// those up to its cut (the max-th oldest) are admitted. Records beyond the
// cap still sit in the informer cache: the importer ignores them but
// cannot stop the broker from sending them (the broker's per-member quota
// is what bounds that).
type capBook struct {
	max int

	mu    sync.Mutex
	count map[string]int
	// cut is the key of the newest admitted record of each cluster that
	// is over the cap.
	cut map[string]recordKey
	// ignored is how many records of each over-cap cluster the last
	// evaluation ignored.
	ignored map[string]int
	// dirty clusters need their cut computed again.
	dirty map[string]bool
}

func newCapBook(max int) *capBook {
	return &capBook{max: max, count: map[string]int{}, cut: map[string]recordKey{}, ignored: map[string]int{}, dirty: map[string]bool{}}
}

// admits reports whether cluster's record with key k counts: every record
// of a cluster that was within the cap when last evaluated (a cluster going
// over it is evaluated before its new record is synced), else those up to
// its cut.
func (b *capBook) admits(cluster string, k recordKey) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	cut, ok := b.cut[cluster]
	return !ok || compareRecordKeys(k, cut) <= 0
}

// added counts a new record and reports whether the cluster's cut must be
// computed now (it just went over the cap) or soon (a record older than
// its cut arrived), or else, when the record is beyond the cut, how many
// of the cluster's records are ignored now.
func (b *capBook) added(cluster string, k recordKey) (now, soon bool, ignored int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.count[cluster]++
	if b.count[cluster] <= b.max {
		return false, false, 0
	}
	cut, ok := b.cut[cluster]
	if !ok {
		return true, false, 0
	}
	if compareRecordKeys(k, cut) < 0 {
		b.dirty[cluster] = true
		return false, true, 0
	}
	b.ignored[cluster]++
	return false, false, b.ignored[cluster]
}

// removed uncounts a record and reports whether the cluster's cut must be
// computed again soon (it is or was over the cap).
func (b *capBook) removed(cluster string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.count[cluster]--
	if b.count[cluster] <= 0 {
		delete(b.count, cluster)
	}
	if _, over := b.cut[cluster]; over {
		b.dirty[cluster] = true
		return true
	}
	return false
}

// evaluate computes cluster's cut from all its records' keys and returns
// the cut before and after (ok false: not over the cap), and how many
// records are ignored now and were before.
func (b *capBook) evaluate(cluster string, keys []recordKey) (before, after recordKey, wasOver, isOver bool, ignoredBefore, ignored int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	before, wasOver = b.cut[cluster]
	ignoredBefore = b.ignored[cluster]
	delete(b.dirty, cluster)
	if len(keys) <= b.max {
		delete(b.cut, cluster)
		delete(b.ignored, cluster)
		return before, recordKey{}, wasOver, false, ignoredBefore, 0
	}
	slices.SortFunc(keys, compareRecordKeys)
	after = keys[b.max-1]
	b.cut[cluster] = after
	b.ignored[cluster] = len(keys) - b.max
	return before, after, wasOver, true, ignoredBefore, len(keys) - b.max
}

// onRecordAdded and onRecordDeleted keep the cap's counts; they run in the
// record informer's handlers.
func (c *Controller) onRecordAdded(obj any) {
	r, ok := obj.(*record.Cached)
	if !ok {
		return
	}
	cluster := r.Labels[record.LabelSourceCluster]
	if cluster == "" {
		// Not a member's (see record.OnlyMembers): no cluster's to count.
		return
	}
	if ns, name := r.Labels[record.LabelServiceNamespace], r.Labels[record.LabelServiceName]; c.serviceDenied(ns, name) {
		c.cfg.Metrics.ignoredRecord(ReasonNamespaceDenied, 1)
		c.cfg.Logger.V(2).Info("Ignoring a broker record: its service or namespace is not imported", "record", klog.KObj(r), "cluster", cluster, "service", klog.KRef(ns, name))
	}
	now, soon, ignored := c.caps.added(cluster, keyOf(r))
	switch {
	case now:
		c.evaluateCap(cluster)
	case soon:
		c.capQueue.AddAfter(cluster, capReevaluateAfter)
	case ignored > 0:
		// Newer than everything kept: ignored without a reevaluation.
		c.cfg.Metrics.ignoredRecord(ReasonOverServiceCap, 1)
		c.cfg.Metrics.setOverCap(cluster, ignored)
		c.cfg.Logger.V(2).Info("Ignoring a broker record beyond its cluster's cap", "record", klog.KObj(r), "cluster", cluster, "cap", c.caps.max)
	}
}

func (c *Controller) onRecordDeleted(obj any) {
	r, ok := cacheobj.Object[*record.Cached](obj)
	if !ok {
		return
	}
	if r.Labels[record.LabelSourceCluster] == "" {
		return
	}
	if c.caps.removed(r.Labels[record.LabelSourceCluster]) {
		c.capQueue.AddAfter(r.Labels[record.LabelSourceCluster], capReevaluateAfter)
	}
}

// evaluateCap computes cluster's cut, resyncs the services whose records
// changed admission, and says when the cluster goes over or back under
// the cap.
func (c *Controller) evaluateCap(cluster string) {
	objs, err := c.records.ByIndex(record.IndexByCluster, cluster)
	if err != nil {
		return
	}
	keys := make([]recordKey, 0, len(objs))
	for _, o := range objs {
		if r, ok := o.(*record.Cached); ok {
			keys = append(keys, keyOf(r))
		}
	}
	before, after, wasOver, isOver, ignoredBefore, ignored := c.caps.evaluate(cluster, keys)
	if ignored > ignoredBefore {
		c.cfg.Metrics.ignoredRecord(ReasonOverServiceCap, ignored-ignoredBefore)
	}
	c.cfg.Metrics.setOverCap(cluster, ignored)
	switch {
	case isOver && !wasOver:
		c.cfg.Logger.Info("A cluster exports more services than the cap: its newest records are ignored", "cluster", cluster, "records", len(keys), "cap", c.caps.max, "ignored", ignored)
		c.cfg.Recorder.Eventf(c.live.Object(), corev1.EventTypeWarning, EventClusterOverServiceCap,
			"Cluster %s has %d export records, more than the %d one cluster may contribute: its %d newest are ignored", cluster, len(keys), c.caps.max, ignored)
	case !isOver && wasOver:
		c.cfg.Logger.Info("A cluster exports no more services than the cap again", "cluster", cluster, "records", len(keys), "cap", c.caps.max)
		c.cfg.Recorder.Eventf(c.live.Object(), corev1.EventTypeNormal, EventClusterWithinServiceCap,
			"Cluster %s has %d export records, within the %d one cluster may contribute: all are imported", cluster, len(keys), c.caps.max)
	}
	if !wasOver && !isOver {
		return
	}
	// Resync the records whose admission changed: those between the old
	// cut and the new one (all beyond either when one side has none).
	admittedBy := func(over bool, cut recordKey, k recordKey) bool {
		return !over || compareRecordKeys(k, cut) <= 0
	}
	for _, o := range objs {
		r, ok := o.(*record.Cached)
		if !ok {
			continue
		}
		k := keyOf(r)
		if admittedBy(wasOver, before, k) != admittedBy(isOver, after, k) {
			c.EnqueueService(r)
		}
	}
}

// capWorker reevaluates clusters whose records changed while over the cap.
func (c *Controller) capWorker() {
	for {
		cluster, quit := c.capQueue.Get()
		if quit {
			return
		}
		c.evaluateCap(cluster)
		c.capQueue.Done(cluster)
	}
}

// admitted reports whether r counts under its cluster's cap.
func (c *Controller) admitted(r *record.Cached) bool {
	return c.caps.admits(r.Labels[record.LabelSourceCluster], keyOf(r))
}
