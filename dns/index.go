package dns

import (
	"cmp"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/klog/v2"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/mcsd-io/mcsd/mcsslice"
)

// Step two of answering: the records, looked up by name.
//
// Index holds what the server answers from. Writers (informer event
// handlers) rebuild the entry of the one service an event touches into a new
// immutable value and publish it; readers load published values without
// locks, so a query never waits for an update, and sees either the old or
// the new entry of a service, never half of one.
type Index struct {
	// Published, read by queries.
	services   syncMap[serviceKey, *service]
	namespaces syncMap[string, struct{}]        // namespaces with a service that exists in DNS
	reverse    syncMap[netip.Addr, []ptrTarget] // owners of each served address, sorted
	// reverseAbove are the partial reverse ranges (/8, /16, /24; every
	// nibble for IPv6) above a served address: names that exist without
	// records.
	reverseAbove syncMap[netip.Prefix, struct{}]
	synced       atomic.Bool
	generation   atomic.Uint32 // bumped on every change; the SOA serial
	nServices    atomic.Int64
	nEndpoints   atomic.Int64

	// Writer state, guarded by mu. Queries never take mu.
	mu         sync.Mutex
	imports    map[serviceKey]*importState
	slices     map[serviceKey]map[string]*sliceState // by slice name
	sliceOwner map[objectKey]serviceKey              // the service each known slice belongs to
	nsCount    map[string]int
	ptrOwners  map[netip.Addr][]ptrTarget
	aboveCount map[netip.Prefix]int
	logger     klog.Logger
	// packed are the answers packed ahead of queries, once a server's zone
	// is attached (see pack.go).
	packed atomic.Pointer[packTable]
	// gate, when set, holds back ClusterSetIPs the node's data plane does
	// not carry yet (see GateVIPs).
	gate *vipGate
	// gone are the clusters whose endpoints are not served (see
	// SetGoneClusters).
	gone mcsslice.GoneClusters
}

// NewIndex returns an empty Index that is not synced yet. Feed it with Run.
func NewIndex(logger klog.Logger) *Index {
	if logger.GetSink() == nil {
		logger = klog.Background()
	}
	return &Index{
		imports:    map[serviceKey]*importState{},
		slices:     map[serviceKey]map[string]*sliceState{},
		sliceOwner: map[objectKey]serviceKey{},
		nsCount:    map[string]int{},
		ptrOwners:  map[netip.Addr][]ptrTarget{},
		aboveCount: map[netip.Prefix]int{},
		logger:     logger,
	}
}

// Synced says whether the Index holds every ServiceImport and EndpointSlice
// the informers listed at start. Until then the server answers SERVFAIL.
func (x *Index) Synced() bool { return x.synced.Load() && (x.gate == nil || x.gate.ready.Load()) }

// Size is the number of ServiceImports and of ready endpoint addresses held.
func (x *Index) Size() (services, endpoints int) {
	return int(x.nServices.Load()), int(x.nEndpoints.Load())
}

func (x *Index) markSynced() { x.synced.Store(true) }

// service returns the entry of a service that exists in DNS: a ClusterSetIP
// service, or a headless one with at least one ready endpoint.
func (x *Index) service(namespace, name string) *service {
	s, ok := x.services.load(serviceKey{namespace, name})
	if !ok || !s.exists() {
		return nil
	}
	return s
}

// hasNamespace says whether any service of the namespace exists in DNS.
func (x *Index) hasNamespace(namespace string) bool {
	_, ok := x.namespaces.load(namespace)
	return ok
}

// hasAddressBelow says whether a served address is inside the partial
// reverse range p.
func (x *Index) hasAddressBelow(p netip.Prefix) bool {
	_, ok := x.reverseAbove.load(p)
	return ok
}

// owners returns who the address belongs to, in a stable order; the first
// is the owner its PTR record names.
func (x *Index) owners(addr netip.Addr) []ptrTarget {
	p, _ := x.reverse.load(addr)
	return p
}

type serviceKey struct{ namespace, name string }

type objectKey struct{ namespace, name string }

// service is the immutable, answer-ready entry of one ServiceImport and its
// EndpointSlices. It is never changed once published.
type service struct {
	namespace, name string
	headless        bool
	vips            []netip.Addr // spec.ips
	ports           []servicePort
	// endpoints are the ready endpoint addresses, each once, in the order of
	// the slices' names; only of a service that answers with them (headless,
	// or without ClusterSetIPs).
	endpoints []endpointAddr
	// nEndpoints is how many distinct ready endpoint addresses it has.
	nEndpoints int
	// hosts are the <hostname>.<clusterid> names of a headless service's
	// ready endpoints, sorted, with their addresses.
	hosts []host
	// hostIndex finds a host by name.
	hostIndex map[hostKey]int
	// clusters that have host names.
	clusters map[string]bool
	// pending is set on a ClusterSetIP service whose ClusterSetIPs the
	// data plane does not carry yet: its name does not exist until then.
	pending bool
}

type servicePort struct {
	name   string // "" for an unnamed port
	proto  string // lower case: "tcp", "udp", "sctp"
	number uint16
}

type endpointAddr struct {
	addr    netip.Addr
	cluster string
}

type hostKey struct{ hostname, cluster string }

type host struct {
	hostKey
	addrs []netip.Addr
}

// exists says whether the service's name exists in DNS: a headless service
// without ready endpoints does not (NXDOMAIN, as the spec says).
func (s *service) exists() bool {
	if s.headless {
		return s.nEndpoints > 0
	}
	return !s.pending
}

// port returns the named port with that name and protocol.
func (s *service) port(name, proto string) (servicePort, bool) {
	for _, p := range s.ports {
		if p.name != "" && p.name == name && p.proto == proto {
			return p, true
		}
	}
	return servicePort{}, false
}

// hasProto says whether a named port uses the protocol.
func (s *service) hasProto(proto string) bool {
	for _, p := range s.ports {
		if p.name != "" && p.proto == proto {
			return true
		}
	}
	return false
}

func (s *service) host(hostname, cluster string) (host, bool) {
	i, ok := s.hostIndex[hostKey{hostname, cluster}]
	if !ok {
		return host{}, false
	}
	return s.hosts[i], true
}

// ptrTarget is what a PTR record of an address points at: the service name,
// or, for a headless endpoint, its <hostname>.<clusterid> name.
type ptrTarget struct {
	namespace, service string
	cluster, hostname  string // empty for a ClusterSetIP
}

func comparePtrTargets(a, b ptrTarget) int {
	// ClusterSetIPs first: a VIP's own name is the better answer.
	if ai, bi := a.hostname == "", b.hostname == ""; ai != bi {
		if ai {
			return -1
		}
		return 1
	}
	return cmp.Or(
		cmp.Compare(a.namespace, b.namespace),
		cmp.Compare(a.service, b.service),
		cmp.Compare(a.cluster, b.cluster),
		cmp.Compare(a.hostname, b.hostname),
	)
}

type ptrEntry struct {
	addr   netip.Addr
	target ptrTarget
}

// ptrEntries are the PTR records the service owns.
func (s *service) ptrEntries() map[ptrEntry]struct{} {
	out := map[ptrEntry]struct{}{}
	if s == nil || !s.exists() {
		return out
	}
	if !s.headless {
		for _, a := range s.vips {
			out[ptrEntry{a, ptrTarget{namespace: s.namespace, service: s.name}}] = struct{}{}
		}
		return out
	}
	for _, h := range s.hosts {
		for _, a := range h.addrs {
			out[ptrEntry{a, ptrTarget{s.namespace, s.name, h.cluster, h.hostname}}] = struct{}{}
		}
	}
	return out
}

// importState is what the Index keeps of a ServiceImport.
type importState struct {
	headless bool
	vips     []netip.Addr
	ports    []servicePort
}

// sliceState is what the Index keeps of an MCS EndpointSlice: its source
// cluster and the addresses of its ready endpoints, flat, so that a slice
// costs the same few allocations however many endpoints it has (with
// hundreds of thousands of endpoints on a node, a small slice per endpoint
// was most of the Index).
type sliceState struct {
	cluster string
	addrs   []netip.Addr
	// hostnames[i] is the hostname of the endpoint addrs[i] belongs to ("":
	// none); nil when no endpoint of the slice has one.
	hostnames []string
}

// hostname is the hostname of the endpoint of the i-th address.
func (st *sliceState) hostname(i int) string {
	if st.hostnames == nil {
		return ""
	}
	return st.hostnames[i]
}

func newImportState(si *mcsv1beta1.ServiceImport, logger klog.Logger) *importState {
	st := &importState{headless: si.Spec.Type == mcsv1beta1.Headless}
	if !st.headless {
		for _, ip := range si.Spec.IPs {
			a, err := netip.ParseAddr(ip)
			if err != nil || a.Zone() != "" {
				logger.V(2).Info("Ignoring a ClusterSetIP that is not an IP address", "serviceImport", klog.KObj(si), "ip", ip)
				continue
			}
			st.vips = append(st.vips, a.Unmap())
		}
	}
	for _, p := range si.Spec.Ports {
		if p.Port < 1 || p.Port > 65535 {
			continue
		}
		proto := strings.ToLower(string(p.Protocol))
		if proto == "" {
			proto = "tcp"
		}
		st.ports = append(st.ports, servicePort{name: strings.ToLower(p.Name), proto: proto, number: uint16(p.Port)})
	}
	return st
}

// sliceService returns the service an MCS EndpointSlice belongs to and its
// source cluster, or ok=false when it lacks either MCS label.
func sliceService(es *discoveryv1.EndpointSlice) (key serviceKey, cluster string, ok bool) {
	name := es.Labels[mcsv1beta1.LabelServiceName]
	cluster = es.Labels[mcsv1beta1.LabelSourceCluster]
	if name == "" || cluster == "" {
		return serviceKey{}, "", false
	}
	return serviceKey{es.Namespace, name}, strings.ToLower(cluster), true
}

func newSliceState(es *discoveryv1.EndpointSlice, cluster string, logger klog.Logger) *sliceState {
	st := &sliceState{cluster: cluster}
	if es.AddressType != discoveryv1.AddressTypeIPv4 && es.AddressType != discoveryv1.AddressTypeIPv6 {
		return st
	}
	n := 0
	for _, ep := range es.Endpoints {
		if ep.Conditions.Ready == nil || *ep.Conditions.Ready {
			n += len(ep.Addresses)
		}
	}
	if n == 0 {
		return st
	}
	st.addrs = make([]netip.Addr, 0, n)
	for _, ep := range es.Endpoints {
		if ep.Conditions.Ready != nil && !*ep.Conditions.Ready {
			continue
		}
		hostname := ""
		if ep.Hostname != nil {
			hostname = strings.ToLower(*ep.Hostname)
		}
		for _, s := range ep.Addresses {
			a, err := netip.ParseAddr(s)
			if err != nil || a.Zone() != "" {
				logger.V(4).Info("Ignoring an endpoint address that is not an IP address", "endpointSlice", klog.KObj(es), "address", s)
				continue
			}
			if hostname != "" && st.hostnames == nil {
				st.hostnames = make([]string, len(st.addrs), n)
			}
			st.addrs = append(st.addrs, a.Unmap())
			if st.hostnames != nil {
				st.hostnames = append(st.hostnames, hostname)
			}
		}
	}
	return st
}

// buildService makes the entry of a service from its ServiceImport and
// slices. It is a pure function of its arguments.
//
// carried says which ClusterSetIPs may be handed out (nil: all of them). A
// ClusterSetIP service with ClusterSetIPs none of which is carried is
// pending.
func buildService(key serviceKey, imp *importState, slicesByName map[string]*sliceState, carried func(netip.Addr) bool) *service {
	s := &service{
		namespace: key.namespace,
		name:      key.name,
		headless:  imp.headless,
		vips:      imp.vips,
		ports:     imp.ports,
	}
	if carried != nil && len(imp.vips) > 0 {
		s.vips = slices.DeleteFunc(slices.Clone(imp.vips), func(a netip.Addr) bool { return !carried(a) })
		s.pending = len(s.vips) == 0
	}
	names := make([]string, 0, len(slicesByName))
	for n := range slicesByName {
		names = append(names, n)
	}
	slices.Sort(names)
	// Only a headless service, or one without ClusterSetIPs, answers
	// with its endpoints' addresses: a ClusterSetIP service counts them.
	keep := s.headless || len(s.vips) == 0
	seen := map[netip.Addr]bool{}
	hostAddrs := map[hostKey][]netip.Addr{}
	for _, n := range names {
		sl := slicesByName[n]
		for i, a := range sl.addrs {
			if !seen[a] {
				seen[a] = true
				s.nEndpoints++
				if keep {
					s.endpoints = append(s.endpoints, endpointAddr{addr: a, cluster: sl.cluster})
				}
			}
			if !s.headless || !isLabel(sl.cluster) {
				// A ClusterSetIP service has no endpoint names; nor
				// do endpoints of a cluster whose ID is not a label.
				continue
			}
			hk := hostKey{hostname: sl.hostname(i), cluster: sl.cluster}
			if hk.hostname == "" {
				hk.hostname = dashedAddr(a)
			}
			if !slices.Contains(hostAddrs[hk], a) {
				hostAddrs[hk] = append(hostAddrs[hk], a)
			}
		}
	}
	if s.headless {
		s.hostIndex = make(map[hostKey]int, len(hostAddrs))
		s.clusters = map[string]bool{}
		for hk, addrs := range hostAddrs {
			s.hosts = append(s.hosts, host{hostKey: hk, addrs: addrs})
			s.clusters[hk.cluster] = true
		}
		slices.SortFunc(s.hosts, func(a, b host) int {
			return cmp.Or(cmp.Compare(a.cluster, b.cluster), cmp.Compare(a.hostname, b.hostname))
		})
		for i, h := range s.hosts {
			s.hostIndex[h.hostKey] = i
		}
	}
	return s
}

// dashedAddr is the hostname of an endpoint that has none: its address with
// dots (IPv4) or colons (IPv6) replaced by dashes, as the MCS conformance
// suite expects (10.1.2.3 -> 10-1-2-3, 2001:db8::1 -> 2001-db8--1). A
// hostname label neither starts nor ends with a dash, so an IPv6 address
// that starts or ends with "::" gets a 0 there (fd00:: -> fd00--0, ::1 ->
// 0--1), as CoreDNS does for cluster-local endpoints.
func dashedAddr(a netip.Addr) string {
	if a.Is4() {
		return strings.ReplaceAll(a.String(), ".", "-")
	}
	d := strings.ReplaceAll(a.String(), ":", "-")
	if strings.HasPrefix(d, "-") {
		d = "0" + d
	}
	if strings.HasSuffix(d, "-") {
		d += "0"
	}
	return d
}

// isLabel says whether a cluster ID can stand as one label of a
// <hostname>.<clusterid> name. Label values allow dots and underscores;
// a name built from such an ID could never be asked for.
func isLabel(s string) bool {
	return len(validation.IsDNS1123Label(s)) == 0
}

// setImport adds or replaces a ServiceImport.
func (x *Index) setImport(si *mcsv1beta1.ServiceImport) {
	st := newImportState(si, x.logger)
	key := serviceKey{si.Namespace, si.Name}
	x.mu.Lock()
	defer x.mu.Unlock()
	if _, ok := x.imports[key]; !ok {
		x.nServices.Add(1)
		x.logger.V(2).Info("Serving DNS records of a ServiceImport", "serviceImport", klog.KObj(si), "type", si.Spec.Type, "ips", si.Spec.IPs)
	}
	if old := x.imports[key]; old != nil {
		x.gate.release(key, old.vips)
	}
	x.imports[key] = st
	x.gate.claim(key, st.vips)
	x.publish(key)
}

// deleteImport removes a ServiceImport; its slices are kept for when it
// comes back.
func (x *Index) deleteImport(namespace, name string) {
	key := serviceKey{namespace, name}
	x.mu.Lock()
	defer x.mu.Unlock()
	old, ok := x.imports[key]
	if !ok {
		return
	}
	x.gate.release(key, old.vips)
	delete(x.imports, key)
	x.nServices.Add(-1)
	x.logger.V(2).Info("No longer serving DNS records of a deleted ServiceImport", "serviceImport", klog.KRef(namespace, name))
	x.publish(key)
}

// setSlice adds or replaces an EndpointSlice. Slices without both MCS labels
// are not MCS slices and are ignored.
func (x *Index) setSlice(es *discoveryv1.EndpointSlice) {
	key, cluster, ok := sliceService(es)
	x.mu.Lock()
	defer x.mu.Unlock()
	ref := objectKey{es.Namespace, es.Name}
	if old, known := x.sliceOwner[ref]; known && (!ok || old != key) {
		// Its labels changed: it left its old service.
		x.removeSlice(ref, old)
	}
	if !ok {
		return
	}
	st := newSliceState(es, cluster, x.logger)
	bySlice := x.slices[key]
	if bySlice == nil {
		bySlice = map[string]*sliceState{}
		x.slices[key] = bySlice
	}
	bySlice[es.Name] = st
	x.sliceOwner[ref] = key
	x.logger.V(4).Info("Updating DNS records from an EndpointSlice", "endpointSlice", klog.KObj(es), "service", key.name, "cluster", cluster, "readyAddresses", len(st.addrs))
	x.publish(key)
}

// deleteSlice removes an EndpointSlice.
func (x *Index) deleteSlice(namespace, name string) {
	ref := objectKey{namespace, name}
	x.mu.Lock()
	defer x.mu.Unlock()
	if key, ok := x.sliceOwner[ref]; ok {
		x.logger.V(4).Info("Removing DNS records of a deleted EndpointSlice", "endpointSlice", klog.KRef(namespace, name), "service", key.name)
		x.removeSlice(ref, key)
	}
}

// removeSlice drops a slice from a service. x.mu must be held.
func (x *Index) removeSlice(ref objectKey, key serviceKey) {
	delete(x.sliceOwner, ref)
	if bySlice := x.slices[key]; bySlice != nil {
		delete(bySlice, ref.name)
		if len(bySlice) == 0 {
			delete(x.slices, key)
		}
	}
	x.publish(key)
}

// publish rebuilds the entry of one service and makes it visible to
// queries, with its namespace and reverse records. x.mu must be held.
func (x *Index) publish(key serviceKey) {
	old, _ := x.services.load(key)
	var cur *service
	if imp := x.imports[key]; imp != nil {
		var carried func(netip.Addr) bool
		if x.gate != nil {
			carried = x.gate.carries
		}
		cur = buildService(key, imp, x.servedSlices(key), carried)
		x.services.store(key, cur)
	} else if old != nil {
		x.services.delete(key)
	}

	x.nEndpoints.Add(int64(endpointCount(cur) - endpointCount(old)))

	oldPtr, curPtr := old.ptrEntries(), cur.ptrEntries()
	changed := map[netip.Addr]bool{}
	for e := range oldPtr {
		if _, ok := curPtr[e]; !ok {
			x.ptrOwners[e.addr] = slices.DeleteFunc(x.ptrOwners[e.addr], func(t ptrTarget) bool { return t == e.target })
			changed[e.addr] = true
		}
	}
	for e := range curPtr {
		if _, ok := oldPtr[e]; !ok {
			x.ptrOwners[e.addr] = append(x.ptrOwners[e.addr], e.target)
			changed[e.addr] = true
		}
	}
	for a := range changed {
		owners := x.ptrOwners[a]
		_, wasServed := x.reverse.load(a)
		if len(owners) == 0 {
			delete(x.ptrOwners, a)
			x.reverse.delete(a)
			x.countAbove(a, -1)
			continue
		}
		if !wasServed {
			x.countAbove(a, 1)
		}
		slices.SortFunc(owners, comparePtrTargets)
		// Publish a copy: the writer's slice changes in place later.
		x.reverse.store(a, slices.Clone(owners))
	}

	wasVisible, isVisible := old != nil && old.exists(), cur != nil && cur.exists()
	nsChanged := false
	switch {
	case isVisible && !wasVisible:
		if x.nsCount[key.namespace]++; x.nsCount[key.namespace] == 1 {
			x.namespaces.store(key.namespace, struct{}{})
			nsChanged = true
		}
	case wasVisible && !isVisible:
		if x.nsCount[key.namespace]--; x.nsCount[key.namespace] == 0 {
			delete(x.nsCount, key.namespace)
			x.namespaces.delete(key.namespace)
			nsChanged = true
		}
	}
	x.repack(key, changed, nsChanged)
	x.generation.Add(1)
}

// countAbove counts an address in (delta 1) or out of (-1) the partial
// reverse ranges above it. x.mu must be held.
func (x *Index) countAbove(a netip.Addr, delta int) {
	reverseAncestors(a, func(p netip.Prefix) {
		n := x.aboveCount[p] + delta
		switch {
		case n <= 0:
			delete(x.aboveCount, p)
			x.reverseAbove.delete(p)
		case n == 1 && delta > 0:
			x.aboveCount[p] = n
			x.reverseAbove.store(p, struct{}{})
		default:
			x.aboveCount[p] = n
		}
	})
}

func endpointCount(s *service) int {
	if s == nil {
		return 0
	}
	return s.nEndpoints
}

// syncMap is a typed sync.Map. Loads take no lock.
type syncMap[K comparable, V any] struct{ m sync.Map }

func (m *syncMap[K, V]) load(k K) (V, bool) {
	v, ok := m.m.Load(k)
	if !ok {
		var zero V
		return zero, false
	}
	return v.(V), true
}

func (m *syncMap[K, V]) store(k K, v V) { m.m.Store(k, v) }
func (m *syncMap[K, V]) delete(k K)     { m.m.Delete(k) }
