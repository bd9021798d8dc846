package proxier

import (
	"net/netip"
	"slices"
	"sort"
	"time"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/mcsd-io/mcsd/mcsslice"
)

// sliceInfo is what the proxier needs of one MCS EndpointSlice. It is
// immutable once built and compared with reflect.DeepEqual, so a slice
// update that changes nothing here (a new resourceVersion, a label the
// proxier does not read) causes no sync.
type sliceInfo struct {
	name string
	// cluster is the slice's source cluster.
	cluster string
	// servicePorts is the decoded mcsslice.ServicePortsAnnotation: nil when the slice
	// has none (it serves every port it names), empty when it could not be
	// decoded (it serves none).
	servicePorts mcsslice.ServicePorts
	// targetPorts are the endpoints' ports by mcsslice.ServicePortKey(name,
	// protocol), each key once: a slice names a few ports, and a map for
	// them would cost more than its endpoints on every node.
	targetPorts []targetPort
	endpoints   []sliceEndpoint
}

type targetPort struct {
	key  string
	port int32
}

// targetPort returns the endpoints' port for a service port key.
func (s *sliceInfo) targetPort(key string) (int32, bool) {
	for _, t := range s.targetPorts {
		if t.key == key {
			return t.port, true
		}
	}
	return 0, false
}

// sliceEndpoint is one endpoint of a slice.
type sliceEndpoint struct {
	ip                          netip.Addr
	nodeName                    string
	ready, serving, terminating bool
}

// newSliceInfo returns the slice's view for family and the ServiceImport it
// belongs to. ok is false for slices the proxier ignores: not labelled with
// multicluster.kubernetes.io/service-name, or of another address type.
func newSliceInfo(slice *discoveryv1.EndpointSlice, family v1.IPFamily) (info *sliceInfo, service types.NamespacedName, ok bool, decodeErr error) {
	name := slice.Labels[mcsv1beta1.LabelServiceName]
	if name == "" {
		return nil, types.NamespacedName{}, false, nil
	}
	if (family == v1.IPv4Protocol && slice.AddressType != discoveryv1.AddressTypeIPv4) ||
		(family == v1.IPv6Protocol && slice.AddressType != discoveryv1.AddressTypeIPv6) {
		return nil, types.NamespacedName{}, false, nil
	}
	service = types.NamespacedName{Namespace: slice.Namespace, Name: name}
	info = &sliceInfo{
		name:    slice.Name,
		cluster: slice.Labels[mcsv1beta1.LabelSourceCluster],
	}
	if value, found := slice.Annotations[mcsslice.ServicePortsAnnotation]; found {
		info.servicePorts, decodeErr = mcsslice.DecodeServicePorts(value)
		if decodeErr != nil {
			info.servicePorts = mcsslice.ServicePorts{}
		}
	}
	for _, p := range slice.Ports {
		if p.Port == nil || *p.Port < 1 || *p.Port > 65535 {
			continue
		}
		name, protocol := "", v1.ProtocolTCP
		if p.Name != nil {
			name = *p.Name
		}
		if p.Protocol != nil {
			protocol = *p.Protocol
		}
		key := mcsslice.ServicePortKey(name, protocol)
		if i := slices.IndexFunc(info.targetPorts, func(t targetPort) bool { return t.key == key }); i >= 0 {
			info.targetPorts[i].port = *p.Port
			continue
		}
		info.targetPorts = append(info.targetPorts, targetPort{key: key, port: *p.Port})
	}
	// Room for every endpoint at once: grown by appending, a slice's
	// endpoints would take up to twice their size for as long as the slice
	// is cached, on every node.
	if len(slice.Endpoints) > 0 {
		info.endpoints = make([]sliceEndpoint, 0, len(slice.Endpoints))
	}
	for _, ep := range slice.Endpoints {
		if len(ep.Addresses) == 0 {
			continue
		}
		addr, err := netip.ParseAddr(ep.Addresses[0])
		if err != nil {
			continue
		}
		addr = addr.Unmap()
		if addr.Is4() != (family == v1.IPv4Protocol) {
			continue
		}
		e := sliceEndpoint{
			ip: addr,
			// The EndpointSlice API: a nil ready or serving means unknown,
			// to be read as true; a nil terminating as false.
			ready:       ep.Conditions.Ready == nil || *ep.Conditions.Ready,
			serving:     ep.Conditions.Serving == nil || *ep.Conditions.Serving,
			terminating: ep.Conditions.Terminating != nil && *ep.Conditions.Terminating,
		}
		if ep.NodeName != nil {
			e.nodeName = *ep.NodeName
		}
		info.endpoints = append(info.endpoints, e)
	}
	return info, service, true, decodeErr
}

// triggerTime is when the change a slice carries was made, from the
// EndpointSlice controller's annotation; zero when it has none.
func triggerTime(slice *discoveryv1.EndpointSlice) time.Time {
	value, ok := slice.Annotations[v1.EndpointsLastChangeTriggerTime]
	if !ok {
		return time.Time{}
	}
	t, err := time.Parse(time.RFC3339Nano, value)
	if err != nil {
		return time.Time{}
	}
	return t
}

// endpoint is one backend of one service port: an address, the port to
// DNAT to, and where it lives.
type endpoint struct {
	ip       netip.Addr
	cluster  string
	nodeName string
	// port after the strings: 64 bytes instead of 72, times every endpoint
	// of every service port the proxier keeps.
	port                        int32
	ready, serving, terminating bool
}

// String is "ip:port" ("[ip]:port" for IPv6), as in a dnat statement.
func (e endpoint) String() string {
	return e.id().String()
}

// id tells endpoints apart: address and port. Unlike String it allocates
// nothing, which counts where a sync compares hundreds of thousands.
func (e endpoint) id() netip.AddrPort {
	return netip.AddrPortFrom(e.ip, uint16(e.port))
}

// endpointsFor returns the endpoints of every slice whose source cluster
// serves port p: the slice names p (by name and protocol) and, when it says
// which number its cluster exports it on, that number is p's. An address in
// several slices (an endpoint moving between slices) counts once, ready if
// any copy is. The result is sorted by address and port.
func endpointsFor(p servicePort, slices []*sliceInfo) []endpoint {
	key := mcsslice.ServicePortKey(p.name, p.protocol)
	n := 0
	for _, s := range slices {
		n += len(s.endpoints)
	}
	seen := make(map[netip.AddrPort]int, n)
	eps := make([]endpoint, 0, n)
	for _, s := range slices {
		target, ok := s.targetPort(key)
		if !ok {
			continue
		}
		if s.servicePorts != nil {
			if exported, ok := s.servicePorts[key]; !ok || exported != p.port {
				continue
			}
		}
		for _, se := range s.endpoints {
			e := endpoint{ip: se.ip, port: target, cluster: s.cluster, nodeName: se.nodeName,
				ready: se.ready, serving: se.serving, terminating: se.terminating}
			id := e.id()
			if i, dup := seen[id]; dup {
				// An endpoint moving between slices is in both for a
				// moment, in its old state in one of them: the ready
				// copy wins, as in kube-proxy.
				if e.ready && !eps[i].ready {
					eps[i] = e
				}
				continue
			}
			seen[id] = len(eps)
			eps = append(eps, e)
		}
	}
	sort.Slice(eps, func(i, j int) bool { return eps[i].id().Compare(eps[j].id()) < 0 })
	return eps
}
