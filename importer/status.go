package importer

import (
	"context"
	"fmt"
	"maps"
	"slices"
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

// Event reasons (liveness's own are package liveness's).
const (
	// On the liveness ConfigMap: once per transition of a cluster over
	// its cap of records and back under it.
	EventClusterOverServiceCap   = "ClusterOverServiceCap"
	EventClusterWithinServiceCap = "ClusterWithinServiceCap"
	// On the liveness ConfigMap: once per cluster without a member
	// declaration, whose endpoints are imported unchecked.
	EventClusterUndeclared = "ClusterUndeclared"
)

// Reasons a record is ignored whole: the reason label of
// mcsd_importer_ignored_records_total.
const (
	ReasonNamespaceDenied      = "NamespaceDenied"
	ReasonOverServiceCap       = "OverServiceCap"
	ReasonClusterGonePastGrace = "ClusterGonePastGrace"
)

// readyCondition is the ServiceImport's Ready condition: False
// (IPFamilyNotSupported) when this cluster serves none of the service's IP
// families, False (Pending) while a ClusterSetIP is missing or no
// contributing cluster is live, and True otherwise. Whether the broker
// answers is not part of it: an outage changes nothing about the
// services, so it costs no write per service (the liveness ConfigMap and
// a metric say it).
func readyCondition(res merge.Result, live []string, ttl time.Duration, local []corev1.IPFamily, generation int64) metav1.Condition {
	cond := metav1.Condition{Type: string(mcsv1beta1.ServiceImportConditionReady), ObservedGeneration: generation}
	switch {
	case !familiesServed(res.Spec.IPFamilies, local):
		cond.Status, cond.Reason = metav1.ConditionFalse, string(mcsv1beta1.ServiceImportReasonIPFamilyNotSupported)
		cond.Message = fmt.Sprintf("The service is %s; this cluster serves %s only", joinFamilies(res.Spec.IPFamilies), joinFamilies(local))
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
func (c *Controller) writeStatus(ctx context.Context, si *mcsv1beta1.ServiceImport, res merge.Result, live []string, rejected []rejection) error {
	cond := readyCondition(res, live, c.cfg.ClusterTTL, c.cfg.IPFamilies, si.Generation)
	rejectedCond := rejectedCondition(rejected, si.Generation)

	status := si.Status.DeepCopy()
	status.Clusters = make([]mcsv1beta1.ClusterStatus, 0, len(live))
	for _, cluster := range live {
		status.Clusters = append(status.Clusters, mcsv1beta1.ClusterStatus{Cluster: cluster})
	}
	meta.SetStatusCondition(&status.Conditions, cond)
	c.Metrics.SetCondition(si.Namespace, si.Name, cond)
	// Rejected is on the ServiceImport only while something is rejected:
	// the clusterset's ServiceImports do not all take a write for it.
	if rejectedCond.Status == metav1.ConditionTrue {
		meta.SetStatusCondition(&status.Conditions, rejectedCond)
	} else {
		meta.RemoveStatusCondition(&status.Conditions, ConditionRejected)
	}
	c.Metrics.SetCondition(si.Namespace, si.Name, rejectedCond)
	if apiequality.Semantic.DeepEqual(&si.Status, status) {
		return nil
	}
	upd := si.DeepCopy()
	upd.Status = *status
	updated, err := c.cfg.LocalMCS.MulticlusterV1beta1().ServiceImports(si.Namespace).UpdateStatus(ctx, upd, metav1.UpdateOptions{})
	if err != nil {
		return fmt.Errorf("updating status of ServiceImport %s/%s: %w", si.Namespace, si.Name, err)
	}
	c.Metrics.Wrote("serviceimport", "update-status")
	c.importCache.Mutation(updated)
	old := meta.FindStatusCondition(si.Status.Conditions, cond.Type)
	if old == nil || old.Status != cond.Status || old.Reason != cond.Reason {
		klog.FromContext(ctx).V(2).Info("Ready condition changed", "serviceImport", klog.KObj(si), "status", cond.Status, "reason", cond.Reason, "message", cond.Message)
		if cond.Reason == string(mcsv1beta1.ServiceImportReasonIPFamilyNotSupported) {
			c.cfg.Recorder.Event(updated, corev1.EventTypeWarning, cond.Reason, cond.Message)
		}
	}
	return nil
}

// rejectedCondition says what the importer refuses of the service's
// records: True with the refusals' reasons, comma-joined and sorted, and
// one message per refusal; False (ReasonNoneRejected) when it refuses
// nothing.
func rejectedCondition(rejected []rejection, generation int64) metav1.Condition {
	cond := metav1.Condition{Type: ConditionRejected, ObservedGeneration: generation, Status: metav1.ConditionFalse, Reason: ReasonNoneRejected}
	if len(rejected) == 0 {
		cond.Message = "Nothing of the exporting clusters' records is rejected"
		return cond
	}
	reasons := map[string]bool{}
	msgs := make([]string, 0, len(rejected))
	for _, r := range rejected {
		reasons[r.reason] = true
		msgs = append(msgs, r.message())
	}
	slices.Sort(msgs)
	cond.Status = metav1.ConditionTrue
	cond.Reason = strings.Join(slices.Sorted(maps.Keys(reasons)), ",")
	cond.Message = strings.Join(msgs, "; ")
	return cond
}
