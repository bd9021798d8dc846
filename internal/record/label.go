package record

import (
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/labels"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
)

// Labels on every object a cluster writes to the broker namespace. The
// broker's admission policy lets a cluster write only objects whose
// LabelSourceCluster is its own ID. Broker EndpointSlices never carry
// kubernetes.io/service-name: no endpointslice controller or kube-proxy
// may take them for a Service's.
const (
	// LabelServiceName is the exported Service's name.
	LabelServiceName = mcsv1beta1.LabelServiceName
	// LabelSourceCluster is the ID of the cluster that wrote the object.
	LabelSourceCluster = mcsv1beta1.LabelSourceCluster
	// LabelServiceNamespace is the exported Service's namespace; with
	// LabelServiceName it selects every record of one service.
	LabelServiceNamespace = "mcsd.io/service-namespace"

	// LabelManagedBy marks broker EndpointSlices as mcsd's, as the
	// EndpointSlice API asks of slices its own controller does not manage.
	LabelManagedBy = discoveryv1.LabelManagedBy
	// EndpointSliceManager is LabelManagedBy's value on broker
	// EndpointSlices: the exporter of the source cluster wrote them.
	EndpointSliceManager = "exporter.mcsd.io"
)

// Labels are the labels of cluster's export record of the Service
// namespace/name.
func Labels(cluster, namespace, name string) map[string]string {
	return map[string]string{
		LabelServiceName:      name,
		LabelServiceNamespace: namespace,
		LabelSourceCluster:    cluster,
	}
}

// EndpointSliceLabels are the labels of cluster's broker EndpointSlices of
// the Service namespace/name: the record's labels and LabelManagedBy.
func EndpointSliceLabels(cluster, namespace, name string) map[string]string {
	l := Labels(cluster, namespace, name)
	l[LabelManagedBy] = EndpointSliceManager
	return l
}

// Labels that mark the ConfigMaps of the broker namespace by what they
// are; vipalloc and broker define their formats.
const (
	// LabelClaim marks a ClusterSetIP block claim.
	LabelClaim = "mcsd.io/clustersetip-block"
	// LabelDeclaration marks a member's declaration.
	LabelDeclaration = "mcsd.io/member-declaration"
	// LabelExportRule marks an export rule.
	LabelExportRule = "mcsd.io/export-rule"
)

// SettingsName is the ConfigMap of the broker namespace that holds the
// broker's settings (package broker defines their format): the admission
// policies' parameter, and the clusterset ranges every member runs with.
const SettingsName = "mcsd-broker-settings"

// AnnotationLeaseVersion on a cluster's heartbeat Lease is the version of
// the mcsd that renews it, for operators.
const AnnotationLeaseVersion = "mcsd.io/version"

// LeaseLabels are the labels of cluster's heartbeat Lease.
func LeaseLabels(cluster string) map[string]string {
	return map[string]string{LabelSourceCluster: cluster}
}

// ServiceSelector selects the objects of every cluster for the Service
// namespace/name: all its export records, or all its EndpointSlices.
func ServiceSelector(namespace, name string) labels.Selector {
	return labels.SelectorFromValidatedSet(labels.Set{
		LabelServiceName:      name,
		LabelServiceNamespace: namespace,
	})
}

// ClusterServiceSelector selects cluster's objects for the Service
// namespace/name, such as its EndpointSlices of that service.
func ClusterServiceSelector(cluster, namespace, name string) labels.Selector {
	return labels.SelectorFromValidatedSet(Labels(cluster, namespace, name))
}

// ClusterSelector selects every object cluster wrote, of every service.
func ClusterSelector(cluster string) labels.Selector {
	return labels.SelectorFromValidatedSet(labels.Set{LabelSourceCluster: cluster})
}
