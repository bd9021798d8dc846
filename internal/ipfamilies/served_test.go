package ipfamilies

import (
	"context"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

func TestServedFamiliesFollowTheClustersServiceCIDR(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cidrs   []string // nil: no ServiceCIDR
		ipv6    bool
		want    []corev1.IPFamily
		wantErr string
	}{
		{name: "IPv4 only", cidrs: []string{"10.96.0.0/12"}, ipv6: true, want: []corev1.IPFamily{corev1.IPv4Protocol}},
		{name: "dual-stack, IPv6 first", cidrs: []string{"fd00:10:96::/112", "10.96.0.0/12"}, ipv6: true, want: []corev1.IPFamily{corev1.IPv6Protocol, corev1.IPv4Protocol}},
		{name: "dual-stack on a host without IPv6", cidrs: []string{"10.96.0.0/12", "fd00:10:96::/112"}, ipv6: false, want: []corev1.IPFamily{corev1.IPv4Protocol}},
		{name: "IPv6 only on a host without IPv6", cidrs: []string{"fd00:10:96::/112"}, ipv6: false, wantErr: "give --ip-families"},
		{name: "no ServiceCIDR (Kubernetes before 1.33)", wantErr: "give --ip-families"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kube := fake.NewClientset()
			if tc.cidrs != nil {
				sc := &networkingv1.ServiceCIDR{ObjectMeta: metav1.ObjectMeta{Name: DefaultServiceCIDR}, Spec: networkingv1.ServiceCIDRSpec{CIDRs: tc.cidrs}}
				if err := kube.Tracker().Add(sc); err != nil {
					t.Fatal(err)
				}
			}
			got, err := Served(context.Background(), kube, func() bool { return tc.ipv6 })
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("families %v, error %v; want an error saying %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil || !slices.Equal(got, tc.want) {
				t.Fatalf("families %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}
