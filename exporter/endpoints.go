package exporter

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/mcsd-io/mcsd/internal/record"
)

// maxEndpointsPerSlice matches the EndpointSlice API's limit.
const maxEndpointsPerSlice = 1000

// brokerSlices computes this cluster's broker EndpointSlices for one service
// from the core controller's local slices: per address family, endpoints
// with the same ports together, at most maxEndpointsPerSlice per slice. The
// result is deterministic, so an unchanged service yields unchanged slices
// and a restart rewrites nothing.
func brokerSlices(cluster, namespace, name string, local []*discoveryv1.EndpointSlice) []*discoveryv1.EndpointSlice {
	type group struct {
		family    discoveryv1.AddressType
		portsKey  string
		ports     []discoveryv1.EndpointPort
		endpoints map[string]discoveryv1.Endpoint
	}
	groups := map[string]*group{}
	for _, s := range local {
		if s.AddressType != discoveryv1.AddressTypeIPv4 && s.AddressType != discoveryv1.AddressTypeIPv6 {
			continue
		}
		ports := normalizePorts(s.Ports)
		key := string(s.AddressType) + "|" + portsKey(ports)
		g := groups[key]
		if g == nil {
			g = &group{family: s.AddressType, portsKey: portsKey(ports), ports: ports, endpoints: map[string]discoveryv1.Endpoint{}}
			groups[key] = g
		}
		for _, ep := range s.Endpoints {
			if len(ep.Addresses) == 0 {
				continue
			}
			// An endpoint moving between local slices may show up in two of
			// them for a moment: keep one copy.
			g.endpoints[ep.Addresses[0]] = brokerEndpoint(ep)
		}
	}

	ordered := make([]*group, 0, len(groups))
	for _, g := range groups {
		ordered = append(ordered, g)
	}
	slices.SortFunc(ordered, func(a, b *group) int {
		return cmp.Or(cmp.Compare(a.family, b.family), cmp.Compare(a.portsKey, b.portsKey))
	})
	var out []*discoveryv1.EndpointSlice
	index := map[discoveryv1.AddressType]int{}
	for _, g := range ordered {
		eps := make([]discoveryv1.Endpoint, 0, len(g.endpoints))
		for _, ep := range g.endpoints {
			eps = append(eps, ep)
		}
		slices.SortFunc(eps, func(a, b discoveryv1.Endpoint) int { return cmp.Compare(a.Addresses[0], b.Addresses[0]) })
		for start := 0; start < len(eps) || (start == 0 && len(eps) == 0); start += maxEndpointsPerSlice {
			end := min(start+maxEndpointsPerSlice, len(eps))
			out = append(out, &discoveryv1.EndpointSlice{
				ObjectMeta: metav1.ObjectMeta{
					Name:   record.EndpointSliceName(cluster, namespace, name, g.family, index[g.family]),
					Labels: record.EndpointSliceLabels(cluster, namespace, name),
				},
				AddressType: g.family,
				Endpoints:   eps[start:end],
				Ports:       g.ports,
			})
			index[g.family]++
			if len(eps) == 0 {
				break
			}
		}
	}
	return out
}

// brokerEndpoint keeps what other clusters need of an endpoint: addresses,
// conditions, hostname, node, zone and the name of the object behind it.
func brokerEndpoint(ep discoveryv1.Endpoint) discoveryv1.Endpoint {
	out := discoveryv1.Endpoint{
		Addresses: slices.Clone(ep.Addresses),
		Conditions: discoveryv1.EndpointConditions{
			Ready:       ptr.To(ptr.Deref(ep.Conditions.Ready, false)),
			Serving:     ptr.To(ptr.Deref(ep.Conditions.Serving, ptr.Deref(ep.Conditions.Ready, false))),
			Terminating: ptr.To(ptr.Deref(ep.Conditions.Terminating, false)),
		},
		Hostname: cloneString(ep.Hostname),
		NodeName: cloneString(ep.NodeName),
		Zone:     cloneString(ep.Zone),
	}
	if ep.TargetRef != nil {
		out.TargetRef = &corev1.ObjectReference{Kind: ep.TargetRef.Kind, Namespace: ep.TargetRef.Namespace, Name: ep.TargetRef.Name}
	}
	return out
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

func portsKey(ports []discoveryv1.EndpointPort) string {
	parts := make([]string, 0, len(ports))
	for _, p := range ports {
		parts = append(parts, fmt.Sprintf("%s/%s/%d/%s", *p.Name, *p.Protocol, ptr.Deref(p.Port, 0), ptr.Deref(p.AppProtocol, "")))
	}
	return strings.Join(parts, ",")
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
