package broker

import (
	"fmt"
	"net/netip"
	"strings"

	corev1 "k8s.io/api/core/v1"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/mcsd-io/mcsd/internal/record"
)

// A member's declaration is what the broker's administrator states about
// the member when it joins, in a ConfigMap of the broker namespace that
// the member cannot write: its pod CIDRs. The admission policy and every
// importer check the member's endpoints against it.
const (
	// LabelDeclaration marks a ConfigMap as a member's declaration; the
	// object also carries the member's source-cluster label.
	LabelDeclaration = record.LabelDeclaration
	// DeclarationPodCIDRsKey holds the member's pod CIDRs, comma-separated.
	DeclarationPodCIDRsKey = "podCIDRs"
)

// DeclarationName is the name of clusterID's declaration ConfigMap.
func DeclarationName(clusterID string) string { return "mcsd-member-" + clusterID }

// Declaration is what the broker states about one member.
type Declaration struct {
	Cluster  string
	PodCIDRs []netip.Prefix
}

// Contains reports whether ip lies in one of the member's pod CIDRs.
func (d Declaration) Contains(ip netip.Addr) bool {
	ip = ip.Unmap()
	for _, p := range d.PodCIDRs {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

// ParseDeclaration reads a declaration ConfigMap, refusing one whose name
// does not match its cluster label or whose CIDRs do not parse.
func ParseDeclaration(cm *corev1.ConfigMap) (Declaration, error) {
	cluster := cm.Labels[mcsv1beta1.LabelSourceCluster]
	if cluster == "" || cm.Name != DeclarationName(cluster) {
		return Declaration{}, fmt.Errorf("member declaration %s: its name must be %s for the cluster its label %s names", cm.Name, DeclarationName(cluster), mcsv1beta1.LabelSourceCluster)
	}
	d := Declaration{Cluster: cluster}
	for _, s := range strings.Split(cm.Data[DeclarationPodCIDRsKey], ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return Declaration{}, fmt.Errorf("member declaration %s: pod CIDR %q: %w", cm.Name, s, err)
		}
		d.PodCIDRs = append(d.PodCIDRs, p.Masked())
	}
	return d, nil
}

// declarationObject is the ConfigMap that declares d.
func declarationObject(namespace string, d Declaration) *corev1.ConfigMap {
	cidrs := make([]string, len(d.PodCIDRs))
	for i, p := range d.PodCIDRs {
		cidrs[i] = p.Masked().String()
	}
	cm := &corev1.ConfigMap{
		Data: map[string]string{DeclarationPodCIDRsKey: strings.Join(cidrs, ",")},
	}
	cm.Name = DeclarationName(d.Cluster)
	cm.Namespace = namespace
	cm.Labels = map[string]string{LabelDeclaration: "", mcsv1beta1.LabelSourceCluster: d.Cluster, "app.kubernetes.io/name": "mcsd"}
	return cm
}
