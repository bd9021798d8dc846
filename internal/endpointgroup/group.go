// Package endpointgroup regroups the endpoints of EndpointSlices into the
// slices mcsd writes: per address family, endpoints with the same ports
// together, each address once, in a stable order, at most MaxPerSlice per
// slice. The exporter uses it for a cluster's broker slices and the importer
// for its local MCS slices, so both write the same layout and an unchanged
// service yields unchanged slices (no writes on restart). It names and
// labels nothing: that is each writer's business.
package endpointgroup

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// MaxPerSlice is the EndpointSlice API's limit of endpoints in one slice.
const MaxPerSlice = 1000

// Group is the endpoints of one address family that share one port list.
type Group struct {
	Family discoveryv1.AddressType
	Ports  []discoveryv1.EndpointPort
	// Endpoints, sorted by first address, one per first address.
	Endpoints []discoveryv1.Endpoint
	portsKey  string
}

// Options say which slices and endpoints take part, and in what form.
type Options struct {
	// Family, when set, keeps only slices of the families it accepts.
	Family func(discoveryv1.AddressType) bool
	// Keep, when set, says which endpoints take part; the others are
	// left out.
	Keep func(discoveryv1.Endpoint) bool
	// Endpoint, when set, turns each endpoint into what is written; by
	// default a deep copy.
	Endpoint func(discoveryv1.Endpoint) discoveryv1.Endpoint
	// Ports, when set, turns each slice's ports into what is written; by
	// default a deep copy. Slices whose written ports are equal share a
	// group.
	Ports func([]discoveryv1.EndpointPort) []discoveryv1.EndpointPort
}

// Of groups the endpoints of slices, in a stable order: by family, then by
// ports. Only IPv4 and IPv6 slices count. An endpoint that shows up in two
// slices (it is moving between them) is kept once. A group of slices
// without endpoints is still returned, empty: the service has that family.
func Of(in []*discoveryv1.EndpointSlice, opts Options) []Group {
	groups := map[string]*Group{}
	for _, s := range in {
		if s.AddressType != discoveryv1.AddressTypeIPv4 && s.AddressType != discoveryv1.AddressTypeIPv6 {
			continue
		}
		if opts.Family != nil && !opts.Family(s.AddressType) {
			continue
		}
		ports := clonePorts(s.Ports)
		if opts.Ports != nil {
			ports = opts.Ports(s.Ports)
		}
		pk := portsKey(ports)
		key := string(s.AddressType) + "|" + pk
		g := groups[key]
		if g == nil {
			g = &Group{Family: s.AddressType, Ports: ports, portsKey: pk}
			groups[key] = g
		}
		for _, ep := range s.Endpoints {
			if len(ep.Addresses) == 0 || (opts.Keep != nil && !opts.Keep(ep)) {
				continue
			}
			if opts.Endpoint != nil {
				ep = opts.Endpoint(ep)
			} else {
				ep = *ep.DeepCopy()
			}
			g.Endpoints = append(g.Endpoints, ep)
		}
	}
	out := make([]Group, 0, len(groups))
	for _, g := range groups {
		// Later copies of an address win, as a map keyed by address would
		// keep them; sort stably first so "later" means slice order.
		slices.SortStableFunc(g.Endpoints, func(a, b discoveryv1.Endpoint) int { return cmp.Compare(a.Addresses[0], b.Addresses[0]) })
		g.Endpoints = dedupe(g.Endpoints)
		out = append(out, *g)
	}
	slices.SortFunc(out, func(a, b Group) int {
		return cmp.Or(cmp.Compare(a.Family, b.Family), cmp.Compare(a.portsKey, b.portsKey))
	})
	return out
}

// Chunks splits the group's endpoints into runs of at most MaxPerSlice, one
// per slice to write; a group without endpoints gives one empty run.
func (g Group) Chunks() [][]discoveryv1.Endpoint { return g.ChunksOf(MaxPerSlice) }

// ChunksOf is Chunks with runs of at most n (at least 1) endpoints.
func (g Group) ChunksOf(n int) [][]discoveryv1.Endpoint {
	if len(g.Endpoints) == 0 {
		return [][]discoveryv1.Endpoint{{}}
	}
	n = max(n, 1)
	var out [][]discoveryv1.Endpoint
	for start := 0; start < len(g.Endpoints); start += n {
		out = append(out, g.Endpoints[start:min(start+n, len(g.Endpoints))])
	}
	return out
}

// Slices lays groups out as EndpointSlices, at most perSlice endpoints
// each (see ChunksOf), a group without endpoints as one empty slice. meta gives each its
// object metadata from its address type and its index among the slices of
// that type, so that an unchanged input yields unchanged names.
func Slices(groups []Group, perSlice int, meta func(family discoveryv1.AddressType, index int) metav1.ObjectMeta) []*discoveryv1.EndpointSlice {
	var out []*discoveryv1.EndpointSlice
	index := map[discoveryv1.AddressType]int{}
	for _, g := range groups {
		for _, eps := range g.ChunksOf(perSlice) {
			out = append(out, &discoveryv1.EndpointSlice{
				ObjectMeta:  meta(g.Family, index[g.Family]),
				AddressType: g.Family,
				Endpoints:   eps,
				Ports:       g.Ports,
			})
			index[g.Family]++
		}
	}
	return out
}

// dedupe keeps the last endpoint of each run of equal first addresses.
func dedupe(eps []discoveryv1.Endpoint) []discoveryv1.Endpoint {
	out := eps[:0]
	for i, ep := range eps {
		if i+1 < len(eps) && eps[i+1].Addresses[0] == ep.Addresses[0] {
			continue
		}
		out = append(out, ep)
	}
	return out
}

func portsKey(ports []discoveryv1.EndpointPort) string {
	parts := make([]string, 0, len(ports))
	for _, p := range ports {
		parts = append(parts, fmt.Sprintf("%s/%s/%d/%s", ptr.Deref(p.Name, ""), ptr.Deref(p.Protocol, corev1.ProtocolTCP), ptr.Deref(p.Port, 0), ptr.Deref(p.AppProtocol, "")))
	}
	slices.Sort(parts)
	return strings.Join(parts, ",")
}

func clonePorts(ports []discoveryv1.EndpointPort) []discoveryv1.EndpointPort {
	if ports == nil {
		return nil
	}
	out := make([]discoveryv1.EndpointPort, len(ports))
	for i := range ports {
		ports[i].DeepCopyInto(&out[i])
	}
	return out
}
