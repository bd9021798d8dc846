package liveness

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
)

// Liveness is published as data: one ConfigMap in this cluster says which
// clusters are gone, and the node's data plane stops serving their
// endpoints from it. A cluster's death is then one write on the critical
// path, whatever the number of its services; their EndpointSlices and
// status follow at the importer's cleanup rate.

// publishBackoff bounds the retries of a failed ConfigMap write.
const (
	publishBackoffMin = 100 * time.Millisecond
	publishBackoffMax = 5 * time.Second
)

// requestPublish asks the publisher to write the current liveness soon.
func (c *Controller) requestPublish() {
	select {
	case c.publishNow <- struct{}{}:
	default:
	}
}

// livenessState is what the ConfigMap should say now: the liveness last
// decided for each cluster and the broker's reachability.
func (c *Controller) livenessState() State {
	s := State{Clusters: map[string]string{}}
	for cluster, live := range c.book.decided() {
		if live {
			s.Clusters[cluster] = Live
		} else {
			s.Clusters[cluster] = Gone
		}
	}
	lastContact, down := c.BrokerDown()
	s.BrokerReachable, s.BrokerLastContact = !down, lastContact
	return s
}

// runPublisher writes the liveness ConfigMap whenever asked, one write at a
// time, retrying with backoff until it holds the latest state.
func (c *Controller) runPublisher(ctx context.Context) {
	backoff := publishBackoffMin
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.publishNow:
		}
		if err := c.publish(ctx, c.livenessState()); err != nil {
			if ctx.Err() != nil {
				return
			}
			klog.FromContext(ctx).Error(err, "Could not publish the clusterset's liveness; retrying", "configMap", klog.KRef(c.cfg.Namespace, ConfigMapName), "retryIn", backoff)
			timer := c.cfg.Clock.NewTimer(backoff)
			select {
			case <-ctx.Done():
				timer.Stop()
				return
			case <-timer.C():
			}
			backoff = min(2*backoff, publishBackoffMax)
			c.requestPublish()
			continue
		}
		backoff = publishBackoffMin
	}
}

// publish makes the ConfigMap say state, creating it when missing.
func (c *Controller) publish(ctx context.Context, state State) error {
	api := c.cfg.Local.CoreV1().ConfigMaps(c.cfg.Namespace)
	cm, err := api.Get(ctx, ConfigMapName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		cm = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
			Namespace: c.cfg.Namespace,
			Name:      ConfigMapName,
			Labels:    map[string]string{"app.kubernetes.io/managed-by": "mcsd"},
		}}
		state.Apply(cm)
		created, err := api.Create(ctx, cm, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		c.wrote("create")
		c.livenessRef.Store(created)
		return nil
	}
	if err != nil {
		return err
	}
	c.livenessRef.Store(cm)
	upd := cm.DeepCopy()
	if !state.Apply(upd) {
		return nil
	}
	updated, err := api.Update(ctx, upd, metav1.UpdateOptions{})
	if err != nil {
		return err
	}
	c.wrote("update")
	c.livenessRef.Store(updated)
	klog.FromContext(ctx).V(2).Info("Published the clusterset's liveness", "configMap", klog.KObj(updated), "goneClusters", state.GoneClusters().String(), "brokerReachable", state.BrokerReachable)
	return nil
}

// Object is what Events about the clusterset are about: the ConfigMap as
// last read or written, or a reference to it before that.
func (c *Controller) Object() *corev1.ConfigMap {
	if cm := c.livenessRef.Load(); cm != nil {
		return cm
	}
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: c.cfg.Namespace, Name: ConfigMapName}}
}

// wrote counts a write of the ConfigMap.
func (c *Controller) wrote(operation string) {
	if c.cfg.Wrote != nil {
		c.cfg.Wrote("configmap", operation)
	}
}
