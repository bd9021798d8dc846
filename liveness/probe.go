package liveness

import (
	"context"
	"errors"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/mcsd-io/mcsd/internal/record"
)

// maxProbeInterval is how often the broker is asked whether it answers
// (more often with a short TTL, see probeInterval).
const maxProbeInterval = 2 * time.Second

// reachability is whether the broker answers, as the probe, the informers'
// watch errors and the heartbeat's hints tell it.
type reachability struct {
	mu          sync.Mutex
	down        bool
	lastContact time.Time
}

// probeInterval is how often the broker is probed: often enough that an
// outage is noticed well before any cluster's TTL runs out on a frozen
// informer cache.
func (c *Controller) probeInterval() time.Duration {
	return min(maxProbeInterval, c.cfg.TTL/3)
}

// BrokerDown reports whether the broker is unreachable, and since when
// (the last time it answered). While it is, nothing is dropped or deleted:
// an empty cache then means nothing.
func (c *Controller) BrokerDown() (time.Time, bool) {
	c.broker.mu.Lock()
	defer c.broker.mu.Unlock()
	return c.broker.lastContact, c.broker.down
}

// runProbe lists the heartbeat Leases every probeInterval, or at once when
// a watch fails or the heartbeat says it could not renew. The answer is
// both the reachability verdict and a source of Lease observations that
// does not depend on the informers' watches, which back off for up to a
// minute after an outage.
func (c *Controller) runProbe(ctx context.Context) {
	for {
		c.probe(ctx)
		timer := c.cfg.Clock.NewTimer(c.probeInterval())
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-timer.C():
		case <-c.probeNow:
		}
		timer.Stop()
	}
}

// probeTimeout is how long a probe waits for the broker's answer before
// taking it for gone. A broker that is merely slow (a busy machine, a
// relist of tens of thousands of objects) must not look gone: that would
// freeze liveness, and a dead cluster's death waits for as long as the
// book is frozen. A probe sent one interval after the last answer and given
// up after this long freezes liveness at least half a TTL before a cluster
// renewing on time could look expired for lack of news (3 s with the
// default 10 s TTL; one interval with short TTLs).
func (c *Controller) probeTimeout() time.Duration {
	return max(c.probeInterval(), c.cfg.TTL/2-c.probeInterval())
}

func (c *Controller) probe(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, c.probeTimeout())
	defer cancel()
	// Across the members' namespaces, as the Lease informer reads them;
	// a Lease counts only in its cluster's own (record.InMember).
	leases, err := c.cfg.Broker.CoordinationV1().Leases(metav1.NamespaceAll).List(ctx, metav1.ListOptions{LabelSelector: record.LabelSourceCluster})
	if ctx.Err() != nil && errors.Is(err, context.Canceled) {
		return // shutting down
	}
	if err == nil {
		for i := range leases.Items {
			if record.InMember(c.cfg.BrokerNamespace, &leases.Items[i]) {
				c.observeLease(&leases.Items[i], "probe")
			}
		}
	}
	c.brokerAnswered(ctx, err)
}

// RequestProbe asks the probe to run now, without waiting for it: a broker
// watch failed (caches.Broker.OnWatchError), so the broker may be gone.
func (c *Controller) RequestProbe() {
	select {
	case c.probeNow <- struct{}{}:
	default:
	}
}

// brokerAnswered takes the outcome of a request to the broker. A success
// after an outage thaws liveness and resyncs every service (removals held
// back during the outage are due); a failure freezes liveness at the last
// success. Either is published on the liveness ConfigMap: one write, and
// none per service.
func (c *Controller) brokerAnswered(ctx context.Context, err error) {
	logger := klog.FromContext(ctx)
	now := c.cfg.Clock.Now()
	c.broker.mu.Lock()
	wasDown := c.broker.down
	if err == nil {
		c.broker.lastContact = now
		c.broker.down = false
	} else {
		c.broker.down = true
	}
	lastContact := c.broker.lastContact
	c.broker.mu.Unlock()

	switch {
	case err == nil && wasDown:
		c.book.thaw()
		c.cfg.Metrics.setBrokerReachable(true)
		logger.Info("The broker answers again; the clusters' time runs again and every service is resynced", "unreachableFor", now.Sub(lastContact))
		c.cfg.Recorder.Eventf(c.Object(), corev1.EventTypeNormal, EventBrokerReachable, "The broker answers again after %s", now.Sub(lastContact).Round(time.Second))
		c.requestPublish()
		// Removals held back during the outage are due.
		c.notify(Transition{Kind: BrokerBack})
		c.reevaluateAll()
	case err == nil:
		c.cfg.Metrics.setBrokerReachable(true)
	case !wasDown:
		c.book.freeze(lastContact)
		c.cfg.Metrics.setBrokerReachable(false)
		logger.Error(err, "The broker does not answer; serving the last known state, dropping no cluster and deleting nothing until it does", "lastContact", lastContact)
		c.cfg.Recorder.Eventf(c.Object(), corev1.EventTypeWarning, EventBrokerUnreachable,
			"The broker has not answered since %s: serving the last known state of every service, dropping no cluster and deleting nothing until it does: %v", lastContact.UTC().Format(time.RFC3339), err)
		c.requestPublish()
	}
}

// ObserveBroker takes a hint from the heartbeat (its OnRenew): a renewal
// that went through proves the broker answers; one that failed has the
// probe check at once. The controller works without these hints. Only the
// probe ends an outage: it lists the Leases first, so the renewals made
// during the outage are seen before the clusters' time runs again.
func (c *Controller) ObserveBroker(err error) {
	if err == nil && c.HasSynced() && c.renewalAnswered() {
		return
	}
	c.RequestProbe()
}

// renewalAnswered notes a renewal that went through as contact with the
// broker, unless the broker is down: then it returns false and only the
// probe may end the outage. One decision under the lock, so that a renewal
// answered just before the broker stopped (a stopping API server finishes
// the requests it has) cannot end an outage the probe has just begun.
func (c *Controller) renewalAnswered() bool {
	c.broker.mu.Lock()
	defer c.broker.mu.Unlock()
	if c.broker.down {
		return false
	}
	c.broker.lastContact = c.cfg.Clock.Now()
	return true
}

// reevaluateAll has every cluster the book knows of reevaluated.
func (c *Controller) reevaluateAll() {
	if !c.HasSynced() {
		return
	}
	for _, cluster := range c.book.clusters() {
		c.clusterQueue.Add(cluster)
	}
}
