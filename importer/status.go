package importer

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/mcsd-io/mcsd/internal/merge"
)

// Event reasons.
const (
	// On the liveness ConfigMap: once per cluster transition.
	EventClusterLeft = "ClusterLeft"
	EventClusterBack = "ClusterBack"
	// On the liveness ConfigMap: once per broker outage.
	EventBrokerUnreachable = "BrokerUnreachable"
	EventBrokerReachable   = "BrokerReachable"
)

// readyCondition is the ServiceImport's Ready condition: False (Pending)
// while a ClusterSetIP is missing or no contributing cluster is live, and
// True otherwise. Whether the broker answers is not part of it: an outage
// changes nothing about the services, so it costs no write per service
// (the liveness ConfigMap and a metric say it).
func readyCondition(res merge.Result, live []string, ttl time.Duration, generation int64) metav1.Condition {
	cond := metav1.Condition{Type: string(mcsv1beta1.ServiceImportConditionReady), ObservedGeneration: generation}
	switch {
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
// changed. Clusters leaving and coming back are told once per cluster, on
// the liveness ConfigMap, not here per service.
func (c *Controller) writeStatus(ctx context.Context, si *mcsv1beta1.ServiceImport, res merge.Result, live []string) error {
	cond := readyCondition(res, live, c.cfg.ClusterTTL, si.Generation)

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
	c.importCache.Mutation(updated)
	old := meta.FindStatusCondition(si.Status.Conditions, cond.Type)
	if old == nil || old.Status != cond.Status || old.Reason != cond.Reason {
		klog.FromContext(ctx).V(2).Info("Ready condition changed", "serviceImport", klog.KObj(si), "status", cond.Status, "reason", cond.Reason, "message", cond.Message)
	}
	return nil
}
