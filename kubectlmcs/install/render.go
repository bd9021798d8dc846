// Package install puts mcsd in a member cluster as kubectl mcs join does:
// the CRDs where they are absent, then the chart charts/mcsd rendered for
// the member with Helm's own engine (package charts), applied server-side
// under one field manager so that joining again changes nothing and
// leaving removes exactly those objects. The chart is the one source: join,
// helm install and kubectl apply -k manifests/mcsd (the chart's rendering)
// install the same objects.
package install

import (
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/mcsd-io/mcsd/charts"
)

// DefaultNamespace is the namespace mcsd runs in unless told otherwise:
// the one of manifests/mcsd and the README's helm install.
const DefaultNamespace = charts.ManifestsNamespace

// Settings are what differs from one member to the next.
type Settings struct {
	// Namespace is mcsd's namespace in the member (default
	// DefaultNamespace).
	Namespace string
	// ClusterID is the ID the member joined the broker with.
	ClusterID string
	// PodCIDRs are the member's pod ranges: the node agents masquerade
	// traffic to a ClusterSetIP from outside them.
	PodCIDRs []netip.Prefix
	// IPFamilies are the families the member serves.
	IPFamilies []corev1.IPFamily
	// ClusterSetCIDRs are the broker's clusterset ranges, which the node
	// agents program and answer for without reading the broker; only those
	// of the member's families are rendered.
	ClusterSetCIDRs []netip.Prefix
	// Image is the full reference of mcsd's image; empty: the image the
	// operator's values name, else DefaultImage.
	Image string
	// Values are the operator's values of the chart (--values, --set),
	// under what join renders for the member.
	Values map[string]any
}

// Objects are the chart rendered for the member of s, in the order to
// apply them, the namespace first.
func Objects(s Settings) ([]*unstructured.Unstructured, error) {
	values, err := MemberValues(s)
	if err != nil {
		return nil, err
	}
	return charts.Objects(namespaceOr(s.Namespace), values)
}

// Shipped are the objects join installs in namespace, as the chart's
// defaults name them: what leave looks for.
func Shipped(namespace string) ([]*unstructured.Unstructured, error) {
	return charts.Objects(namespaceOr(namespace), charts.ManifestValues())
}

func namespaceOr(namespace string) string {
	if namespace == "" {
		return DefaultNamespace
	}
	return namespace
}
