package exporter

import (
	"context"
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/mcsd-io/mcsd/internal/merge"
	"github.com/mcsd-io/mcsd/internal/record"
)

// ConditionClusterSetIP reports whether the export got its ClusterSetIPs;
// it is False, with an event, when this cluster's block is exhausted.
const ConditionClusterSetIP = "ClusterSetIPAllocated"

// status is the ServiceExport's conditions as one sync computes them.
type status struct {
	export     *mcsv1beta1.ServiceExport
	conditions []metav1.Condition
}

func newStatus(export *mcsv1beta1.ServiceExport) *status {
	conds := make([]metav1.Condition, len(export.Status.Conditions))
	copy(conds, export.Status.Conditions)
	return &status{export: export, conditions: conds}
}

func (s *status) set(t string, st metav1.ConditionStatus, reason, message string) {
	meta.SetStatusCondition(&s.conditions, metav1.Condition{
		Type: t, Status: st, Reason: reason, Message: message, ObservedGeneration: s.export.Generation,
	})
}

func (s *status) invalid(reason mcsv1beta1.ServiceExportConditionReason, message string) {
	s.set(string(mcsv1beta1.ServiceExportConditionValid), metav1.ConditionFalse, string(reason), message)
	s.set(string(mcsv1beta1.ServiceExportConditionReady), metav1.ConditionFalse, string(mcsv1beta1.ServiceExportReasonFailed), "Not exported: "+message)
	meta.RemoveStatusCondition(&s.conditions, string(mcsv1beta1.ServiceExportConditionConflict))
	meta.RemoveStatusCondition(&s.conditions, ConditionClusterSetIP)
}

func (s *status) valid() {
	s.set(string(mcsv1beta1.ServiceExportConditionValid), metav1.ConditionTrue, string(mcsv1beta1.ServiceExportReasonValid), "The Service can be exported")
	if meta.FindStatusCondition(s.conditions, string(mcsv1beta1.ServiceExportConditionReady)) == nil {
		s.set(string(mcsv1beta1.ServiceExportConditionReady), metav1.ConditionUnknown, string(mcsv1beta1.ServiceExportReasonPending), "Writing the export to the broker")
	}
}

func (s *status) failed(err error) {
	s.set(string(mcsv1beta1.ServiceExportConditionReady), metav1.ConditionFalse, string(mcsv1beta1.ServiceExportReasonFailed), truncate("Cannot write the export to the broker (retrying): "+err.Error()))
}

func (s *status) exported() {
	s.set(string(mcsv1beta1.ServiceExportConditionReady), metav1.ConditionTrue, string(mcsv1beta1.ServiceExportReasonExported), "The export is on the broker")
}

func (s *status) conflict(v merge.Verdict) {
	c := v.Condition(s.export.Generation)
	c.Message = truncate(c.Message)
	meta.SetStatusCondition(&s.conditions, c)
}

func (s *status) clusterSetIP(own record.Export, err error) {
	switch {
	case err != nil && errors.Is(err, errVIPExhausted):
		s.set(ConditionClusterSetIP, metav1.ConditionFalse, "Exhausted", truncate(err.Error()))
	case err != nil:
		s.set(ConditionClusterSetIP, metav1.ConditionFalse, "Unavailable", truncate(err.Error()))
	case own.Type == mcsv1beta1.ClusterSetIP && !own.ClusterSetIPDisabled && len(own.VIPs) > 0:
		s.set(ConditionClusterSetIP, metav1.ConditionTrue, "Allocated", "ClusterSetIPs: "+strings.Join(own.VIPs, ", "))
	default:
		meta.RemoveStatusCondition(&s.conditions, ConditionClusterSetIP)
	}
}

// good says which status of a condition is the healthy one.
func good(c metav1.Condition) bool {
	if c.Type == string(mcsv1beta1.ServiceExportConditionConflict) {
		return c.Status == metav1.ConditionFalse
	}
	return c.Status == metav1.ConditionTrue
}

// bad says whether a condition asks for an operator: unhealthy and not
// merely unknown yet.
func bad(c metav1.Condition) bool { return !good(c) && c.Status != metav1.ConditionUnknown }

// writeStatus writes the conditions through the status subresource when
// they changed. Events are for what an operator acts on: a condition that
// turns bad (a warning) and one that recovers from bad (normal). A new
// export becoming valid and exported is routine, and at thousands of
// exports its events would crowd the API server and the client's budget.
func (c *Controller) writeStatus(ctx context.Context, export *mcsv1beta1.ServiceExport, s *status) error {
	for _, cond := range s.conditions {
		c.Metrics.SetCondition(export.Namespace, export.Name, cond)
	}
	if apiequality.Semantic.DeepEqual(export.Status.Conditions, s.conditions) {
		return nil
	}
	for _, cond := range s.conditions {
		old := meta.FindStatusCondition(export.Status.Conditions, cond.Type)
		if old != nil && old.Status == cond.Status && old.Reason == cond.Reason {
			continue
		}
		var kind string
		switch {
		case bad(cond):
			kind = corev1.EventTypeWarning
		case old != nil && bad(*old) && good(cond):
			kind = corev1.EventTypeNormal
		default:
			continue
		}
		c.cfg.Recorder.Event(export, kind, cond.Reason, fmt.Sprintf("%s=%s: %s", cond.Type, cond.Status, cond.Message))
	}
	upd := export.DeepCopy()
	upd.Status.Conditions = s.conditions
	_, err := c.cfg.LocalMCS.MulticlusterV1beta1().ServiceExports(export.Namespace).UpdateStatus(ctx, upd, metav1.UpdateOptions{})
	if err != nil {
		return fmt.Errorf("updating status of ServiceExport %s/%s: %w", export.Namespace, export.Name, err)
	}
	return nil
}

// truncate keeps a condition message within the API's 32 KiB limit.
func truncate(msg string) string {
	const limit = 32 * 1024
	if len(msg) <= limit {
		return msg
	}
	return msg[:limit-3] + "..."
}
