package importer

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/mcsd-io/mcsd/internal/merge"
)

// ReasonBrokerUnreachable is the Ready condition's reason (status Unknown)
// while the broker does not answer and the ServiceImport shows the last
// known state.
const ReasonBrokerUnreachable = "BrokerUnreachable"

// Event reasons on ServiceImports besides the Ready condition's reasons.
const (
	EventClusterLeft = "ClusterLeft"
	EventClusterBack = "ClusterBack"
)

// readyCondition is the ServiceImport's Ready condition: Unknown while the
// broker does not answer (the last known state is served), False (Pending)
// while a ClusterSetIP is missing or no contributing cluster is live, and
// True otherwise.
func readyCondition(res merge.Result, live []string, ttl time.Duration, brokerDown bool, lastContact time.Time, generation int64) metav1.Condition {
	cond := metav1.Condition{Type: string(mcsv1beta1.ServiceImportConditionReady), ObservedGeneration: generation}
	switch {
	case brokerDown:
		cond.Status, cond.Reason = metav1.ConditionUnknown, ReasonBrokerUnreachable
		cond.Message = fmt.Sprintf("The broker has not answered since %s; serving the last known state of this service until it does", lastContact.UTC().Format(time.RFC3339))
	case len(res.MissingVIPFamilies) > 0:
		cond.Status, cond.Reason = metav1.ConditionFalse, string(mcsv1beta1.ServiceImportReasonPending)
		cond.Message = fmt.Sprintf("Waiting for a ClusterSetIP of family %s from the exporting clusters", joinFamilies(res.MissingVIPFamilies))
	case len(live) == 0:
		cond.Status, cond.Reason = metav1.ConditionFalse, string(mcsv1beta1.ServiceImportReasonPending)
		cond.Message = fmt.Sprintf("No exporting cluster is live: the broker Leases of %s were not renewed within %s", strings.Join(res.Clusters, ", "), ttl)
	default:
		cond.Status, cond.Reason = metav1.ConditionTrue, string(mcsv1beta1.ServiceImportReasonReady)
		cond.Message = "Imported from " + strings.Join(live, ", ")
	}
	return cond
}

func joinFamilies(families []corev1.IPFamily) string {
	parts := make([]string, len(families))
	for i, f := range families {
		parts[i] = string(f)
	}
	return strings.Join(parts, ", ")
}

// writeStatus sets status.clusters to the live contributing clusters and
// the Ready condition, through the status subresource and only when they
// changed; then it reports clusters that left or came back, and Ready
// transitions, as events.
func (c *Controller) writeStatus(ctx context.Context, si *mcsv1beta1.ServiceImport, res merge.Result, live []string) error {
	key := si.Namespace + "/" + si.Name
	lastContact, down := c.brokerDown()
	cond := readyCondition(res, live, c.cfg.ClusterTTL, down, lastContact, si.Generation)

	status := si.Status.DeepCopy()
	status.Clusters = make([]mcsv1beta1.ClusterStatus, 0, len(live))
	for _, cluster := range live {
		status.Clusters = append(status.Clusters, mcsv1beta1.ClusterStatus{Cluster: cluster})
	}
	meta.SetStatusCondition(&status.Conditions, cond)
	c.cfg.Metrics.setCondition(si.Namespace, si.Name, cond)
	if apiequality.Semantic.DeepEqual(&si.Status, status) {
		return nil
	}
	upd := si.DeepCopy()
	upd.Status = *status
	updated, err := c.cfg.LocalMCS.MulticlusterV1beta1().ServiceImports(si.Namespace).UpdateStatus(ctx, upd, metav1.UpdateOptions{})
	if err != nil {
		return fmt.Errorf("updating status of ServiceImport %s/%s: %w", si.Namespace, si.Name, err)
	}
	c.cfg.Metrics.wrote("serviceimport", "update-status")

	logger := klog.FromContext(ctx)
	var before []string
	for _, cs := range si.Status.Clusters {
		before = append(before, cs.Cluster)
	}
	for _, cluster := range before {
		if slices.Contains(live, cluster) || !slices.Contains(res.Clusters, cluster) {
			continue
		}
		// Still exporting, but not live: its Lease expired.
		c.departures.add(key, cluster)
		logger.Info("Dropped a gone cluster's endpoints from the import", "serviceImport", klog.KObj(si), "cluster", cluster)
		c.cfg.Recorder.Eventf(updated, corev1.EventTypeWarning, EventClusterLeft,
			"Cluster %s left: its broker Lease was not renewed within %s; its endpoints are removed until it renews", cluster, c.cfg.ClusterTTL)
	}
	for _, cluster := range live {
		if slices.Contains(before, cluster) || !c.departures.remove(key, cluster) {
			continue
		}
		logger.Info("Restored a returning cluster's endpoints to the import", "serviceImport", klog.KObj(si), "cluster", cluster)
		c.cfg.Recorder.Eventf(updated, corev1.EventTypeNormal, EventClusterBack, "Cluster %s is back: its broker Lease is renewed again", cluster)
	}
	old := meta.FindStatusCondition(si.Status.Conditions, cond.Type)
	if (old == nil && cond.Status != metav1.ConditionTrue) || (old != nil && (old.Status != cond.Status || old.Reason != cond.Reason)) {
		kind := corev1.EventTypeNormal
		if cond.Status != metav1.ConditionTrue {
			kind = corev1.EventTypeWarning
		}
		c.cfg.Recorder.Event(updated, kind, cond.Reason, fmt.Sprintf("%s=%s: %s", cond.Type, cond.Status, cond.Message))
	}
	return nil
}

// departures remembers, per service, the clusters dropped from it because
// their Lease expired, so their return is told apart from a new export.
type departures struct {
	mu   sync.Mutex
	left map[string]map[string]bool
}

func newDepartures() *departures { return &departures{left: map[string]map[string]bool{}} }

func (d *departures) add(key, cluster string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.left[key] == nil {
		d.left[key] = map[string]bool{}
	}
	d.left[key][cluster] = true
}

// remove forgets that cluster left the service and reports whether it had.
func (d *departures) remove(key, cluster string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.left[key][cluster] {
		return false
	}
	delete(d.left[key], cluster)
	if len(d.left[key]) == 0 {
		delete(d.left, key)
	}
	return true
}

func (d *departures) forget(key string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.left, key)
}
