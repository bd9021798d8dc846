package harness_test

import (
	"context"
	"net/netip"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/mcsd-io/mcsd/test/lib/harness"
)

// TestDualStackAndSingleStackIPv6 starts two dual-stack clusters and an
// IPv6-only one in one clusterset: pods get an address of each of their
// cluster's families and reach each other over each family the two
// clusters share, and a PreferDualStack Service gets a cluster IP and an
// EndpointSlice per family of its cluster.
func TestDualStackAndSingleStackIPv6(t *testing.T) {
	cs := harness.Start(t, harness.Options{
		Clusters:         3,
		IPFamilies:       harness.DualStack,
		MemberIPFamilies: [][]corev1.IPFamily{harness.DualStack, harness.DualStack, harness.IPv6Only},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c1, c2, c3 := cs.Members[0], cs.Members[1], cs.Members[2]
	if got := harness.SharedFamilies(c1, c2); !slices.Equal(got, harness.DualStack) {
		t.Fatalf("cluster1 and cluster2 share %v, want %v", got, harness.DualStack)
	}
	if got := harness.SharedFamilies(c1, c3); !slices.Equal(got, harness.IPv6Only) {
		t.Fatalf("cluster1 and cluster3 share %v, want %v", got, harness.IPv6Only)
	}

	var pods []*harness.Pod
	for _, c := range cs.Members {
		node, err := c.AddNode(ctx)
		if err != nil {
			t.Fatalf("%s: %v", c.Name, err)
		}
		if len(node.IPs) != len(c.IPFamilies) || len(node.PodSubnets) != len(c.IPFamilies) {
			t.Fatalf("%s: node addresses %v and pod subnets %v, want one per family of %v", c.Name, node.IPs, node.PodSubnets, c.IPFamilies)
		}
		p, err := node.AddPod(ctx, harness.PodSpec{Name: "pod", Labels: map[string]string{"app": "pod"}})
		if err != nil {
			t.Fatalf("%s: %v", c.Name, err)
		}
		for k, f := range c.IPFamilies {
			if harness.FamilyOf(p.IPs[k]) != f || !c.PodCIDRs[k].Contains(p.IPs[k]) {
				t.Fatalf("%s: pod address %d is %s, want one of %s in %s", c.Name, k, p.IPs[k], f, c.PodCIDRs[k])
			}
		}
		pods = append(pods, p)
	}
	t.Logf("pods: %v, %v, %v", pods[0].IPs, pods[1].IPs, pods[2].IPs)

	t.Run("pods reach each other over every family their clusters share, TCP and UDP", func(t *testing.T) {
		for i, from := range pods {
			for j, to := range pods {
				if i == j {
					continue
				}
				for _, f := range harness.SharedFamilies(from.Node.Cluster, to.Node.Cluster) {
					addr, _ := to.IPOf(f)
					for _, network := range []string{"tcp", "udp"} {
						id, err := from.Ask(ctx, network, netip.AddrPortFrom(addr, 8080).String())
						if err != nil {
							t.Fatalf("%s to %s over %s: %v", from.Node.Cluster.Name, addr, network, err)
						}
						if id.IP != addr.String() || id.Cluster != to.Node.Cluster.Name {
							t.Fatalf("%s to %s over %s answered by %v", from.Node.Cluster.Name, addr, network, id)
						}
					}
				}
			}
		}
	})

	t.Run("a PreferDualStack Service gets a cluster IP and an EndpointSlice per family", func(t *testing.T) {
		for i, c := range cs.Members {
			svc, err := c.Kube.CoreV1().Services("default").Create(ctx, &corev1.Service{
				ObjectMeta: metav1.ObjectMeta{Name: "pod"},
				Spec: corev1.ServiceSpec{
					Selector:       map[string]string{"app": "pod"},
					IPFamilyPolicy: ptr.To(corev1.IPFamilyPolicyPreferDualStack),
					Ports:          []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolTCP}},
				},
			}, metav1.CreateOptions{})
			if err != nil {
				t.Fatalf("%s: %v", c.Name, err)
			}
			if !slices.Equal(svc.Spec.IPFamilies, c.IPFamilies) || len(svc.Spec.ClusterIPs) != len(c.IPFamilies) {
				t.Fatalf("%s: Service families %v, cluster IPs %v; want one of each of %v", c.Name, svc.Spec.IPFamilies, svc.Spec.ClusterIPs, c.IPFamilies)
			}
			for k, ip := range svc.Spec.ClusterIPs {
				if !c.ServiceCIDRs[k].Contains(netip.MustParseAddr(ip)) {
					t.Fatalf("%s: cluster IP %s outside %s", c.Name, ip, c.ServiceCIDRs[k])
				}
			}
			for _, f := range c.IPFamilies {
				want, _ := pods[i].IPOf(f)
				at := discoveryv1.AddressType(f)
				err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
					list, err := c.Kube.DiscoveryV1().EndpointSlices("default").List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=pod"})
					if err != nil {
						return false, nil
					}
					for _, s := range list.Items {
						if s.AddressType == at && len(s.Endpoints) == 1 && s.Endpoints[0].Addresses[0] == want.String() {
							return true, nil
						}
					}
					return false, nil
				})
				if err != nil {
					t.Fatalf("%s: no %s EndpointSlice with the pod's address %s", c.Name, at, want)
				}
			}
		}
	})
}
