package dns

import (
	"net/netip"
	"strings"

	"github.com/miekg/dns"
	"k8s.io/klog/v2"
)

// Step three of answering: build the records of an answer from what the
// Index holds.

// zone answers questions about the clusterset zone, and the reverse names
// of what it serves, from an Index: for the Server's queries, and ahead of
// them for the answers the Index packs when it publishes a service. It
// knows the zone's names and TTL, not sockets.
type zone struct {
	index        *Index
	names        zoneNames
	ttl          uint32
	nsAddresses  []netip.Addr
	localCluster string
	// maxUDPSize bounds the answers packed for the UDP fast path.
	maxUDPSize int
	logger     klog.Logger
}

// SchemaVersion is the MCS DNS schema version served as
// dns-version.<zone> TXT.
const SchemaVersion = "1.1.0"

// SOA timers. Nothing transfers the zone; they are conventional values.
const (
	soaRefresh = 7200
	soaRetry   = 1800
	soaExpire  = 86400
)

// maxNameLen is the longest name in presentation format, with its final
// dot, that fits the 255 octets of a wire-format name (names served here
// have no escaped characters). Longer names, which a 63-character cluster ID
// with long hostname, service and namespace names can make, are left out of
// answers: a resolver rejects a message holding one whole.
const maxNameLen = 254

// answer fills m with the answer to question q, parsed as qn. turn gives
// the position multi-address answers start at; it is called once per
// answer that has two addresses or more to turn.
func (zn *zone) answer(m *dns.Msg, q dns.Question, qn question, turn func() uint64) {
	m.Authoritative = true
	apex := zn.names.origin
	if qn.zone != "" {
		apex = qn.zone
	}
	switch qn.kind {
	case kindNone:
		zn.nxdomain(m, apex)
	case kindApex, kindReverseApex, kindVersion, kindNameServer:
		zn.answerZone(m, q, qn)
	case kindEmpty, kindServices:
		// Names with nothing but names below them: NODATA.
	case kindNamespace:
		if !zn.index.hasNamespace(qn.namespace) {
			zn.nxdomain(m, apex)
		}
	case kindService, kindProto, kindPort, kindCluster, kindEndpoint:
		zn.answerService(m, q, qn, apex, turn)
	case kindReverseAbove:
		if !zn.index.hasAddressBelow(qn.prefix) {
			zn.nxdomain(m, apex)
		}
	case kindReverse:
		var ok bool
		if apex, ok = zn.answerReverse(m, q, qn, apex); !ok {
			return
		}
	}
	if m.Rcode == dns.RcodeSuccess && len(m.Answer) == 0 {
		// NODATA: the name exists, without records of that type.
		m.Ns = append(m.Ns, zn.soa(apex))
	}
}

// answerZone answers the names of the zone itself: its apexes (and the
// reverse zones'), the dns-version name, and the name server's name.
func (zn *zone) answerZone(m *dns.Msg, q dns.Question, qn question) {
	t := q.Qtype
	switch qn.kind {
	case kindApex, kindReverseApex:
		if t == dns.TypeSOA || t == dns.TypeANY {
			m.Answer = append(m.Answer, zn.soa(q.Name))
		}
		if t == dns.TypeNS || t == dns.TypeANY {
			m.Answer = append(m.Answer, &dns.NS{Hdr: zn.hdr(q.Name, dns.TypeNS), Ns: zn.names.nsName})
			if zn.names.nsIn {
				m.Extra = append(m.Extra, zn.addrRecords(zn.names.nsName, dns.TypeANY, zn.nsAddresses)...)
			}
		}
	case kindVersion:
		if t == dns.TypeTXT || t == dns.TypeANY {
			m.Answer = append(m.Answer, &dns.TXT{Hdr: zn.hdr(q.Name, dns.TypeTXT), Txt: []string{SchemaVersion}})
		}
	case kindNameServer:
		m.Answer = append(m.Answer, zn.addrRecords(q.Name, t, zn.nsAddresses)...)
	}
}

// answerService answers the names of a service: the service's own, its
// ports' and protocols' SRV names, and its endpoints' names under their
// clusters.
func (zn *zone) answerService(m *dns.Msg, q dns.Question, qn question, apex string, turn func() uint64) {
	t := q.Qtype
	svc := zn.index.service(qn.namespace, qn.service)
	if svc == nil {
		zn.nxdomain(m, apex)
		return
	}
	switch qn.kind {
	case kindService:
		if t == dns.TypeSRV {
			zn.srv(m, q.Name, svc, svc.ports, turn)
		} else {
			m.Answer = append(m.Answer, zn.addrRecords(q.Name, t, zn.serviceAddrs(svc, t, turn))...)
		}
	case kindProto:
		if !svc.hasProto(qn.proto) {
			zn.nxdomain(m, apex)
		}
	case kindPort:
		p, ok := svc.port(qn.port, qn.proto)
		switch {
		case !ok:
			zn.nxdomain(m, apex)
		case t == dns.TypeSRV || t == dns.TypeANY:
			zn.srv(m, q.Name, svc, []servicePort{p}, turn)
		}
	case kindCluster:
		// Above the hostnames of a cluster's endpoints, but with no records
		// of its own: the spec forbids names that single out one cluster's
		// backends.
		if !svc.clusters[qn.cluster] {
			zn.nxdomain(m, apex)
		}
	case kindEndpoint:
		h, ok := svc.host(qn.hostname, qn.cluster)
		if !ok {
			zn.nxdomain(m, apex)
			return
		}
		m.Answer = append(m.Answer, zn.addrRecords(q.Name, t, h.addrs)...)
	}
}

// answerReverse answers an address's reverse name and returns the apex of
// its negative answers: the reverse zone's, or outside the reverse zones
// the name itself, for which the server is authoritative alone. ok is
// false when m is complete: NXDOMAIN in a reverse zone, REFUSED outside.
func (zn *zone) answerReverse(m *dns.Msg, q dns.Question, qn question, apex string) (string, bool) {
	target, ok := zn.ptrTarget(qn.addr)
	switch {
	case !ok && qn.zone != "":
		zn.nxdomain(m, apex)
		return apex, false
	case !ok:
		// Not an address this server serves, outside its reverse
		// zones: not authoritative.
		m.Authoritative = false
		m.Rcode = dns.RcodeRefused
		return apex, false
	}
	if q.Qtype == dns.TypePTR || q.Qtype == dns.TypeANY {
		m.Answer = append(m.Answer, &dns.PTR{Hdr: zn.hdr(q.Name, dns.TypePTR), Ptr: target})
	}
	if qn.zone == "" {
		// Outside the server's reverse zones it is authoritative for
		// this one name only: it is its own apex.
		apex = strings.ToLower(q.Name)
	}
	return apex, true
}

// ptrTarget is the name the PTR record of addr points at. Only one PTR
// record may exist per address (the spec's Limitations): an address two
// services share, such as a pod behind two headless services, gets the
// first owner's name that fits in a message.
func (zn *zone) ptrTarget(addr netip.Addr) (string, bool) {
	for _, o := range zn.index.owners(addr) {
		if name := zn.targetName(o); len(name) <= maxNameLen {
			return name, true
		}
	}
	return "", false
}

// nxdomain makes m a negative answer with the SOA of the zone apex.
func (zn *zone) nxdomain(m *dns.Msg, apex string) {
	m.Rcode = dns.RcodeNameError
	m.Ns = append(m.Ns, zn.soa(apex))
}

func (zn *zone) hdr(name string, t uint16) dns.RR_Header {
	return dns.RR_Header{Name: name, Rrtype: t, Class: dns.ClassINET, Ttl: zn.ttl}
}

// soa is the zone's SOA record, owned by apex. Its minimum (the negative
// caching TTL) is the TTL of every record.
func (zn *zone) soa(apex string) dns.RR {
	return &dns.SOA{
		Hdr:     zn.hdr(apex, dns.TypeSOA),
		Ns:      zn.names.nsName,
		Mbox:    zn.names.mbox,
		Serial:  zn.index.generation.Load(),
		Refresh: soaRefresh,
		Retry:   soaRetry,
		Expire:  soaExpire,
		Minttl:  zn.ttl,
	}
}

// addrRecords are the A (t A), AAAA (t AAAA) or both (t ANY) records of
// name for addrs; none for other types.
func (zn *zone) addrRecords(name string, t uint16, addrs []netip.Addr) []dns.RR {
	var out []dns.RR
	for _, a := range addrs {
		switch {
		case a.Is4() && (t == dns.TypeA || t == dns.TypeANY):
			out = append(out, &dns.A{Hdr: zn.hdr(name, dns.TypeA), A: a.AsSlice()})
		case a.Is6() && (t == dns.TypeAAAA || t == dns.TypeANY):
			out = append(out, &dns.AAAA{Hdr: zn.hdr(name, dns.TypeAAAA), AAAA: a.AsSlice()})
		}
	}
	return out
}

// serviceAddrs are the addresses <svc>.<ns>.svc.<zone> resolves to, of the
// family of t (both for ANY): the ClusterSetIPs; or, for a headless service
// and for a ClusterSetIP service without ClusterSetIPs, the ready endpoint
// addresses in an order that turns with every answer (this cluster's
// endpoints first for the latter).
func (zn *zone) serviceAddrs(svc *service, t uint16, turn func() uint64) []netip.Addr {
	if t != dns.TypeA && t != dns.TypeAAAA && t != dns.TypeANY {
		return nil
	}
	want := func(a netip.Addr) bool {
		return t == dns.TypeANY || (t == dns.TypeA) == a.Is4()
	}
	if !svc.headless && len(svc.vips) > 0 {
		var out []netip.Addr
		for _, a := range svc.vips {
			if want(a) {
				out = append(out, a)
			}
		}
		return out
	}
	var local, remote []netip.Addr
	for _, e := range svc.endpoints {
		if !want(e.addr) {
			continue
		}
		if !svc.headless && e.cluster == zn.localCluster {
			local = append(local, e.addr)
		} else {
			remote = append(remote, e.addr)
		}
	}
	if len(local)+len(remote) < 2 {
		return append(local, remote...)
	}
	k := turn()
	return append(rotate(local, k), rotate(remote, k)...)
}

// rotate returns addrs starting at position turn (mod its length).
func rotate(addrs []netip.Addr, turn uint64) []netip.Addr {
	if len(addrs) < 2 {
		return addrs
	}
	k := int(turn % uint64(len(addrs)))
	return append(addrs[k:len(addrs):len(addrs)], addrs[:k]...)
}

// srv adds the SRV records of the ports to m, each distinct (port number,
// target) once, with the targets' addresses in the additional section. A
// ClusterSetIP service's target is its own name; a headless service's
// targets are its endpoints' <hostname>.<clusterid> names, but for those
// too long to be a name (maxNameLen). For the bare name
// <svc>.<ns>.svc.<zone>, ports are all of the service's ports.
func (zn *zone) srv(m *dns.Msg, name string, svc *service, ports []servicePort, turn func() uint64) {
	type record struct {
		port   uint16
		target string
	}
	seen := map[record]bool{}
	var records []record
	extra := map[string][]netip.Addr{}
	var extraOrder []string
	add := func(port uint16, target string, addrs func() []netip.Addr) {
		r := record{port, target}
		if seen[r] {
			return
		}
		seen[r] = true
		records = append(records, r)
		if _, ok := extra[target]; !ok {
			extra[target] = addrs()
			extraOrder = append(extraOrder, target)
		}
	}
	for _, p := range ports {
		if !svc.headless {
			add(p.number, zn.serviceName(svc), func() []netip.Addr { return zn.serviceAddrs(svc, dns.TypeANY, turn) })
			continue
		}
		for _, h := range svc.hosts {
			if target := zn.hostName(svc, h.hostKey); len(target) <= maxNameLen {
				add(p.number, target, func() []netip.Addr { return h.addrs })
			}
		}
	}
	if len(records) == 0 {
		return
	}
	weight := uint16(max(1, 100/len(records)))
	for _, r := range records {
		m.Answer = append(m.Answer, &dns.SRV{Hdr: zn.hdr(name, dns.TypeSRV), Priority: 0, Weight: weight, Port: r.port, Target: r.target})
	}
	for _, target := range extraOrder {
		m.Extra = append(m.Extra, zn.addrRecords(target, dns.TypeANY, extra[target])...)
	}
}

// serviceName is <svc>.<ns>.svc.<zone>.
func (zn *zone) serviceName(svc *service) string {
	return svc.name + "." + svc.namespace + ".svc." + zn.names.origin
}

// hostName is <hostname>.<clusterid>.<svc>.<ns>.svc.<zone>.
func (zn *zone) hostName(svc *service, h hostKey) string {
	return h.hostname + "." + h.cluster + "." + zn.serviceName(svc)
}

// targetName is the name a PTR record points at.
func (zn *zone) targetName(t ptrTarget) string {
	name := t.service + "." + t.namespace + ".svc." + zn.names.origin
	if t.hostname != "" {
		name = t.hostname + "." + t.cluster + "." + name
	}
	return name
}
