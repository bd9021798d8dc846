package importer

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/mcsd-io/mcsd/internal/merge"
)

func TestReadyCondition(t *testing.T) {
	res := merge.Result{Clusters: []string{"east", "west"}}
	for _, tc := range []struct {
		name         string
		res          merge.Result
		live         []string
		status       metav1.ConditionStatus
		reason, says string
	}{
		{"every cluster live", res, []string{"east", "west"}, metav1.ConditionTrue, "Ready", "east, west"},
		{"some clusters live", res, []string{"west"}, metav1.ConditionTrue, "Ready", "west"},
		{"no cluster live", res, nil, metav1.ConditionFalse, "Pending", "not renewed within 6s"},
		{"a ClusterSetIP missing", merge.Result{Clusters: []string{"east"}, MissingVIPFamilies: []corev1.IPFamily{corev1.IPv6Protocol}}, []string{"east"}, metav1.ConditionFalse, "Pending", "IPv6"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := readyCondition(tc.res, tc.live, ttl, 3)
			if c.Type != "Ready" || c.Status != tc.status || c.Reason != tc.reason || c.ObservedGeneration != 3 || !strings.Contains(c.Message, tc.says) {
				t.Fatalf("condition %+v, want %s/%s saying %q", c, tc.status, tc.reason, tc.says)
			}
		})
	}
}
