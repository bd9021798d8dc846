package mcsslice

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/mcsd-io/mcsd/internal/record"
)

// Manager is the endpointslice.kubernetes.io/managed-by value of the MCS
// EndpointSlices mcsd's importer writes in member clusters. It is not the
// core controller's, so the EndpointSlice controller leaves them alone.
const Manager = "importer.mcsd.io"

// Selector selects MCS EndpointSlices: those with both MCS labels, whoever
// wrote them, but the broker's (they carry record.LabelServiceNamespace),
// which a member that is also the broker holds in its member namespaces.
// A data plane's informer limited to it caches only MCS slices; slices
// without the labels are ignored either way.
const Selector = mcsv1beta1.LabelServiceName + "," + mcsv1beta1.LabelSourceCluster + ",!" + record.LabelServiceNamespace

// ImporterSelector selects the MCS EndpointSlices mcsd's importer writes:
// Manager's and both MCS labels. An informer that the importer and the data
// plane share selects these.
var ImporterSelector = labels.SelectorFromSet(labels.Set{discoveryv1.LabelManagedBy: Manager}).String() + "," + Selector

// Labels are the labels of an MCS EndpointSlice holding cluster's endpoints
// of the service: the two mcs-api labels and Manager, never
// kubernetes.io/service-name (kube-proxy must not take it for a Service's).
func Labels(service, cluster string) map[string]string {
	return map[string]string{
		mcsv1beta1.LabelServiceName:   service,
		mcsv1beta1.LabelSourceCluster: cluster,
		discoveryv1.LabelManagedBy:    Manager,
	}
}

// Name is the name of the index-th MCS EndpointSlice holding cluster's
// endpoints of the service in one address family:
// "<service>.<cluster>.<family>-<index>", for example "cart.east.ipv4-0".
// Service names and cluster IDs are RFC 1123 labels without dots, so the
// name is unique in the namespace and never equals a core EndpointSlice's
// ("<service>-<random>"). Should it not be a valid name, it is a readable
// prefix and a hash of the parts instead.
func Name(service, cluster string, family discoveryv1.AddressType, index int) string {
	suffix := strings.ToLower(string(family)) + "-" + strconv.Itoa(index)
	name := service + "." + cluster + "." + suffix
	if len(validation.IsDNS1123Label(service)) == 0 && len(validation.IsDNS1123Label(cluster)) == 0 &&
		len(validation.IsDNS1123Subdomain(name)) == 0 {
		return name
	}
	sum := sha256.Sum256([]byte(service + "\x00" + cluster + "\x00" + suffix))
	var b strings.Builder
	for _, r := range strings.ToLower(service + "-" + cluster) {
		if b.Len() >= 100 {
			break
		}
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
		} else {
			b.WriteByte('-')
		}
	}
	prefix := strings.Trim(b.String(), "-")
	if prefix != "" {
		prefix += "-"
	}
	return prefix + hex.EncodeToString(sum[:])[:40] + "-" + suffix
}
