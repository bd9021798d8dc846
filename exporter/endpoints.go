package exporter

import (
	"cmp"
	"slices"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/mcsd-io/mcsd/internal/endpointgroup"
	"github.com/mcsd-io/mcsd/internal/record"
)

// brokerSlices computes this cluster's broker EndpointSlices for one service
// from the core controller's local slices, laid out by endpointgroup. The
// result is deterministic, so an unchanged service yields unchanged slices
// and a restart rewrites nothing.
func brokerSlices(cluster, namespace, name string, local []*discoveryv1.EndpointSlice) []*discoveryv1.EndpointSlice {
	groups := endpointgroup.Of(local, endpointgroup.Options{Endpoint: brokerEndpoint, Ports: normalizePorts})
	return endpointgroup.Slices(groups, record.MaxEndpointsPerSlice, func(family discoveryv1.AddressType, index int) metav1.ObjectMeta {
		return metav1.ObjectMeta{
			Name:   record.EndpointSliceName(cluster, namespace, name, family, index),
			Labels: record.EndpointSliceLabels(cluster, namespace, name),
		}
	})
}

// brokerEndpoint keeps what other clusters use of an endpoint: its
// addresses, conditions and hostname. Its node, zone and target name this
// cluster's objects, which mean nothing elsewhere (importers drop them) and
// which the broker refuses, so that its budget per endpoint stays small.
func brokerEndpoint(ep discoveryv1.Endpoint) discoveryv1.Endpoint {
	return discoveryv1.Endpoint{
		Addresses: slices.Clone(ep.Addresses),
		Conditions: discoveryv1.EndpointConditions{
			Ready:       ptr.To(ptr.Deref(ep.Conditions.Ready, false)),
			Serving:     ptr.To(ptr.Deref(ep.Conditions.Serving, ptr.Deref(ep.Conditions.Ready, false))),
			Terminating: ptr.To(ptr.Deref(ep.Conditions.Terminating, false)),
		},
		Hostname: cloneString(ep.Hostname),
	}
}

func normalizePorts(ports []discoveryv1.EndpointPort) []discoveryv1.EndpointPort {
	out := make([]discoveryv1.EndpointPort, 0, len(ports))
	for _, p := range ports {
		q := discoveryv1.EndpointPort{
			Name:        cloneString(p.Name),
			Port:        cloneInt32(p.Port),
			AppProtocol: cloneString(p.AppProtocol),
			Protocol:    ptr.To(ptr.Deref(p.Protocol, corev1.ProtocolTCP)),
		}
		if q.Name == nil {
			q.Name = ptr.To("")
		}
		out = append(out, q)
	}
	slices.SortFunc(out, func(a, b discoveryv1.EndpointPort) int {
		return cmp.Or(cmp.Compare(*a.Name, *b.Name), cmp.Compare(*a.Protocol, *b.Protocol))
	})
	return out
}

// sliceUpToDate reports whether the broker's slice already holds what want
// says, so a writer can skip a no-op update.
func sliceUpToDate(have, want *discoveryv1.EndpointSlice) bool {
	for k, v := range want.Labels {
		if have.Labels[k] != v {
			return false
		}
	}
	return have.AddressType == want.AddressType &&
		apiequality.Semantic.DeepEqual(have.Endpoints, want.Endpoints) &&
		apiequality.Semantic.DeepEqual(have.Ports, want.Ports)
}

// sliceUpdate is the broker's slice with want's labels, endpoints and
// ports, keeping labels of others.
func sliceUpdate(cur, want *discoveryv1.EndpointSlice) *discoveryv1.EndpointSlice {
	upd := cur.DeepCopy()
	if upd.Labels == nil {
		upd.Labels = map[string]string{}
	}
	for k, v := range want.Labels {
		upd.Labels[k] = v
	}
	upd.Endpoints, upd.Ports = want.Endpoints, want.Ports
	return upd
}

func cloneString(s *string) *string {
	if s == nil {
		return nil
	}
	return ptr.To(*s)
}

func cloneInt32(v *int32) *int32 {
	if v == nil {
		return nil
	}
	return ptr.To(*v)
}
