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
	v4, v6 := corev1.IPv4Protocol, corev1.IPv6Protocol
	withFamilies := func(f ...corev1.IPFamily) merge.Result {
		r := merge.Result{Clusters: []string{"east"}}
		r.Spec.IPFamilies = f
		return r
	}
	v4Only, v6Only, dual := withFamilies(v4), withFamilies(v6), withFamilies(v4, v6)
	for _, tc := range []struct {
		name         string
		res          merge.Result
		live         []string
		local        []corev1.IPFamily
		status       metav1.ConditionStatus
		reason, says string
	}{
		{"every cluster live", res, []string{"east", "west"}, nil, metav1.ConditionTrue, "Ready", "east, west"},
		{"some clusters live", res, []string{"west"}, nil, metav1.ConditionTrue, "Ready", "west"},
		{"no cluster live", res, nil, nil, metav1.ConditionFalse, "Pending", "not renewed within 6s"},
		{"a ClusterSetIP missing", merge.Result{Clusters: []string{"east"}, MissingVIPFamilies: []corev1.IPFamily{v6}}, []string{"east"}, nil, metav1.ConditionFalse, "Pending", "IPv6"},
		{"an IPv6 service in an IPv4 cluster", v6Only, []string{"east"}, []corev1.IPFamily{v4}, metav1.ConditionFalse, "IPFamilyNotSupported", "The service is IPv6; this cluster serves IPv4 only"},
		{"an IPv6 service in an IPv4 cluster, whatever else is wrong", merge.Result{Clusters: []string{"east"}, Spec: v6Only.Spec, MissingVIPFamilies: []corev1.IPFamily{v6}}, nil, []corev1.IPFamily{v4}, metav1.ConditionFalse, "IPFamilyNotSupported", "IPv6"},
		{"an IPv6 service in an IPv6 cluster", v6Only, []string{"east"}, []corev1.IPFamily{v6}, metav1.ConditionTrue, "Ready", "east"},
		{"a dual-stack service in an IPv4 cluster", dual, []string{"east"}, []corev1.IPFamily{v4}, metav1.ConditionTrue, "Ready", "east"},
		{"a dual-stack service in an IPv6 cluster", dual, []string{"east"}, []corev1.IPFamily{v6}, metav1.ConditionTrue, "Ready", "east"},
		{"an IPv4 service in a cluster of unknown families", v4Only, []string{"east"}, nil, metav1.ConditionTrue, "Ready", "east"},
		{"a service of unknown families in an IPv6 cluster", res, []string{"east"}, []corev1.IPFamily{v6}, metav1.ConditionTrue, "Ready", "east"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := readyCondition(tc.res, tc.live, 6*time.Second, tc.local, 3)
			if c.Type != "Ready" || c.Status != tc.status || c.Reason != tc.reason || c.ObservedGeneration != 3 || !strings.Contains(c.Message, tc.says) {
				t.Fatalf("condition %+v, want %s/%s saying %q", c, tc.status, tc.reason, tc.says)
			}
		})
	}
}
