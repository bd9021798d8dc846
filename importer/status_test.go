package importer

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/mcsd-io/mcsd/internal/merge"
)

func TestReadyCondition(t *testing.T) {
	res := merge.Result{Clusters: []string{"east", "west"}}
	since := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name         string
		res          merge.Result
		live         []string
		down         bool
		status       metav1.ConditionStatus
		reason, says string
	}{
		{"every cluster live", res, []string{"east", "west"}, false, metav1.ConditionTrue, "Ready", "east, west"},
		{"some clusters live", res, []string{"west"}, false, metav1.ConditionTrue, "Ready", "west"},
		{"no cluster live", res, nil, false, metav1.ConditionFalse, "Pending", "not renewed within 6s"},
		{"a ClusterSetIP missing", merge.Result{Clusters: []string{"east"}, MissingVIPFamilies: []corev1.IPFamily{corev1.IPv6Protocol}}, []string{"east"}, false, metav1.ConditionFalse, "Pending", "IPv6"},
		{"the broker unreachable, whatever else", merge.Result{Clusters: []string{"east"}, MissingVIPFamilies: []corev1.IPFamily{corev1.IPv4Protocol}}, nil, true, metav1.ConditionUnknown, "BrokerUnreachable", "since 2026-11-22T10:00:00Z; serving the last known state"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := readyCondition(tc.res, tc.live, ttl, tc.down, since, 3)
			if c.Type != "Ready" || c.Status != tc.status || c.Reason != tc.reason || c.ObservedGeneration != 3 || !strings.Contains(c.Message, tc.says) {
				t.Fatalf("condition %+v, want %s/%s saying %q", c, tc.status, tc.reason, tc.says)
			}
		})
	}
}
