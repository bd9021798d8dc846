// Package record defines what one member cluster writes to the broker about
// one exported service, and how it is named and labelled there: the export
// record (a per-cluster ServiceImport), the names and labels of the
// cluster's EndpointSlices, and the name of its heartbeat Lease. It turns a
// record into an Export and back, and checks that a record is well formed.
// It talks to no API server and never decides how exports are merged; that
// is package merge.
//
// The format is described in docs/broker-records.md.
package record

import (
	"errors"
	"fmt"
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
)

// Export is one cluster's view of one exported service: what that cluster's
// exporter writes to the broker, and what every cluster's merge reads.
type Export struct {
	// Cluster is the ID of the exporting cluster.
	Cluster string
	// Namespace and Name are those of the exported Service and its
	// ServiceExport.
	Namespace string
	Name      string
	// Created is the ServiceExport's creationTimestamp: the oldest export
	// has precedence when exports conflict. The record keeps it to the
	// second, as the API server does. Read from a stored record (Decode)
	// it is never earlier than the record object's own creationTimestamp
	// (see Witnessed).
	Created metav1.Time

	// Type is Headless for a Service with clusterIP None, ClusterSetIP
	// for every other exportable Service.
	Type mcsv1beta1.ServiceImportType
	// Ports are the Service's ports, without targetPort and nodePort.
	Ports                 []mcsv1beta1.ServicePort
	SessionAffinity       corev1.ServiceAffinity
	SessionAffinityConfig *corev1.SessionAffinityConfig
	IPFamilies            []corev1.IPFamily
	InternalTrafficPolicy *corev1.ServiceInternalTrafficPolicy
	TrafficDistribution   *string

	// ExportedLabels and ExportedAnnotations are the ServiceExport's
	// spec.exportedLabels and spec.exportedAnnotations.
	ExportedLabels      map[string]string
	ExportedAnnotations map[string]string

	// ClusterSetIPDisabled says this export opted out of ClusterSetIPs
	// (VIPs off, by the global flag or the ServiceExport's annotation).
	ClusterSetIPDisabled bool
	// VIPs are the ClusterSetIPs this cluster holds for the service, at
	// most one per IP family. Empty for Headless and for opted-out exports.
	VIPs []string
}

// ErrExternalName is returned by TypeOf and FromService for an ExternalName
// Service, which cannot be exported (the ServiceExport is not Valid).
var ErrExternalName = errors.New("an ExternalName Service cannot be exported")

// TypeOf is the ServiceImport type a Service exports as: Headless when its
// clusterIP is None, ClusterSetIP for ClusterIP, NodePort and LoadBalancer
// Services.
func TypeOf(svc *corev1.Service) (mcsv1beta1.ServiceImportType, error) {
	if svc.Spec.Type == corev1.ServiceTypeExternalName {
		return "", fmt.Errorf("service %s/%s: %w", svc.Namespace, svc.Name, ErrExternalName)
	}
	if svc.Spec.ClusterIP == corev1.ClusterIPNone {
		return mcsv1beta1.Headless, nil
	}
	return mcsv1beta1.ClusterSetIP, nil
}

// FromService builds the Export of cluster for a ServiceExport and its
// Service. It copies what it takes, so the result shares no memory with
// its arguments (which may come from an informer cache). VIPs and
// ClusterSetIPDisabled are left for the caller, who knows the VIP policy
// and allocations.
func FromService(cluster string, export *mcsv1beta1.ServiceExport, svc *corev1.Service) (Export, error) {
	if export.Namespace != svc.Namespace || export.Name != svc.Name {
		return Export{}, fmt.Errorf("ServiceExport %s/%s does not export Service %s/%s",
			export.Namespace, export.Name, svc.Namespace, svc.Name)
	}
	typ, err := TypeOf(svc)
	if err != nil {
		return Export{}, err
	}
	ports := make([]mcsv1beta1.ServicePort, 0, len(svc.Spec.Ports))
	for _, p := range svc.Spec.Ports {
		proto := p.Protocol
		if proto == "" {
			proto = corev1.ProtocolTCP
		}
		ports = append(ports, mcsv1beta1.ServicePort{
			Name:        p.Name,
			Protocol:    proto,
			AppProtocol: cloneString(p.AppProtocol),
			Port:        p.Port,
		})
	}
	return Export{
		Cluster:               cluster,
		Namespace:             export.Namespace,
		Name:                  export.Name,
		Created:               *export.CreationTimestamp.DeepCopy(),
		Type:                  typ,
		Ports:                 ports,
		SessionAffinity:       svc.Spec.SessionAffinity,
		SessionAffinityConfig: svc.Spec.SessionAffinityConfig.DeepCopy(),
		IPFamilies:            slices.Clone(svc.Spec.IPFamilies),
		InternalTrafficPolicy: cloneITP(svc.Spec.InternalTrafficPolicy),
		TrafficDistribution:   cloneString(svc.Spec.TrafficDistribution),
		ExportedLabels:        maps.Clone(export.Spec.ExportedLabels),
		ExportedAnnotations:   maps.Clone(export.Spec.ExportedAnnotations),
	}, nil
}

// DeepCopy returns a copy of e that shares no memory with it.
func (e Export) DeepCopy() Export {
	out := e
	out.Created = *e.Created.DeepCopy()
	out.Ports = make([]mcsv1beta1.ServicePort, len(e.Ports))
	for i := range e.Ports {
		e.Ports[i].DeepCopyInto(&out.Ports[i])
	}
	if e.Ports == nil {
		out.Ports = nil
	}
	out.SessionAffinityConfig = e.SessionAffinityConfig.DeepCopy()
	out.IPFamilies = slices.Clone(e.IPFamilies)
	out.InternalTrafficPolicy = cloneITP(e.InternalTrafficPolicy)
	out.TrafficDistribution = cloneString(e.TrafficDistribution)
	out.ExportedLabels = maps.Clone(e.ExportedLabels)
	out.ExportedAnnotations = maps.Clone(e.ExportedAnnotations)
	out.VIPs = slices.Clone(e.VIPs)
	return out
}

func cloneString(s *string) *string {
	if s == nil {
		return nil
	}
	v := *s
	return &v
}

func cloneITP(p *corev1.ServiceInternalTrafficPolicy) *corev1.ServiceInternalTrafficPolicy {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}
