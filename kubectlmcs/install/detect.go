package install

import (
	"context"
	"fmt"
	"net/netip"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// NodePodCIDRs are the pod ranges the member's nodes were given
// (spec.podCIDRs), each once: what join declares when --pod-cidrs is not
// given. A node added later with a range outside them needs join again.
func NodePodCIDRs(ctx context.Context, kube kubernetes.Interface) ([]netip.Prefix, error) {
	nodes, err := kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing the member's nodes to learn their pod CIDRs (or give --pod-cidrs): %w", err)
	}
	var out []netip.Prefix
	for _, n := range nodes.Items {
		for _, c := range n.Spec.PodCIDRs {
			p, err := netip.ParsePrefix(c)
			if err != nil {
				return nil, fmt.Errorf("node %s: pod CIDR %q: %w", n.Name, c, err)
			}
			if p = p.Masked(); !slices.Contains(out, p) {
				out = append(out, p)
			}
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no node of the member has spec.podCIDRs (its network plugin allocates pod addresses itself): give --pod-cidrs")
	}
	return out, nil
}
