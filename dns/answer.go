package dns

import (
	"net/netip"
	"strings"

	"github.com/miekg/dns"
)

// Step three of answering: build the records of an answer from what the
// Index holds.

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
func (s *Server) answer(m *dns.Msg, q dns.Question, qn question, turn func() uint64) {
	m.Authoritative = true
	t := q.Qtype
	apex := s.names.origin
	if qn.zone != "" {
		apex = qn.zone
	}
	switch qn.kind {
	case kindNone:
		s.nxdomain(m, apex)
	case kindApex, kindReverseApex:
		if t == dns.TypeSOA || t == dns.TypeANY {
			m.Answer = append(m.Answer, s.soa(q.Name))
		}
		if t == dns.TypeNS || t == dns.TypeANY {
			m.Answer = append(m.Answer, &dns.NS{Hdr: s.hdr(q.Name, dns.TypeNS), Ns: s.names.nsName})
			if s.names.nsIn {
				m.Extra = append(m.Extra, s.addrRecords(s.names.nsName, dns.TypeANY, s.cfg.NSAddresses)...)
			}
		}
	case kindVersion:
		if t == dns.TypeTXT || t == dns.TypeANY {
			m.Answer = append(m.Answer, &dns.TXT{Hdr: s.hdr(q.Name, dns.TypeTXT), Txt: []string{SchemaVersion}})
		}
	case kindNameServer:
		m.Answer = append(m.Answer, s.addrRecords(q.Name, t, s.cfg.NSAddresses)...)
	case kindEmpty, kindServices:
		// Names with nothing but names below them: NODATA.
	case kindNamespace:
		if !s.index.hasNamespace(qn.namespace) {
			s.nxdomain(m, apex)
		}
	case kindService:
		svc := s.index.service(qn.namespace, qn.service)
		switch {
		case svc == nil:
			s.nxdomain(m, apex)
		case t == dns.TypeSRV:
			s.srv(m, q.Name, svc, svc.ports, turn)
		default:
			m.Answer = append(m.Answer, s.addrRecords(q.Name, t, s.serviceAddrs(svc, t, turn))...)
		}
	case kindProto:
		if svc := s.index.service(qn.namespace, qn.service); svc == nil || !svc.hasProto(qn.proto) {
			s.nxdomain(m, apex)
		}
	case kindPort:
		svc := s.index.service(qn.namespace, qn.service)
		if svc == nil {
			s.nxdomain(m, apex)
			break
		}
		p, ok := svc.port(qn.port, qn.proto)
		if !ok {
			s.nxdomain(m, apex)
			break
		}
		if t == dns.TypeSRV || t == dns.TypeANY {
			s.srv(m, q.Name, svc, []servicePort{p}, turn)
		}
	case kindCluster:
		// Above the hostnames of a cluster's endpoints, but with no records
		// of its own: the spec forbids names that single out one cluster's
		// backends.
		if svc := s.index.service(qn.namespace, qn.service); svc == nil || !svc.clusters[qn.cluster] {
			s.nxdomain(m, apex)
		}
	case kindEndpoint:
		svc := s.index.service(qn.namespace, qn.service)
		if svc == nil {
			s.nxdomain(m, apex)
			break
		}
		h, ok := svc.host(qn.hostname, qn.cluster)
		if !ok {
			s.nxdomain(m, apex)
			break
		}
		m.Answer = append(m.Answer, s.addrRecords(q.Name, t, h.addrs)...)
	case kindReverseAbove:
		if !s.index.hasAddressBelow(qn.prefix) {
			s.nxdomain(m, apex)
		}
	case kindReverse:
		target, ok := s.ptrTarget(qn.addr)
		switch {
		case !ok && qn.zone != "":
			s.nxdomain(m, apex)
			return
		case !ok:
			// Not an address this server serves, outside its reverse
			// zones: not authoritative.
			m.Authoritative = false
			m.Rcode = dns.RcodeRefused
			return
		}
		if t == dns.TypePTR || t == dns.TypeANY {
			m.Answer = append(m.Answer, &dns.PTR{Hdr: s.hdr(q.Name, dns.TypePTR), Ptr: target})
		}
		if qn.zone == "" {
			// Outside the server's reverse zones it is authoritative for
			// this one name only: it is its own apex.
			apex = strings.ToLower(q.Name)
		}
	}
	if m.Rcode == dns.RcodeSuccess && len(m.Answer) == 0 {
		// NODATA: the name exists, without records of that type.
		m.Ns = append(m.Ns, s.soa(apex))
	}
}

// ptrTarget is the name the PTR record of addr points at. Only one PTR
// record may exist per address (the spec's Limitations): an address two
// services share, such as a pod behind two headless services, gets the
// first owner's name that fits in a message.
func (s *Server) ptrTarget(addr netip.Addr) (string, bool) {
	for _, o := range s.index.owners(addr) {
		if name := s.targetName(o); len(name) <= maxNameLen {
			return name, true
		}
	}
	return "", false
}

// nxdomain makes m a negative answer with the SOA of the zone apex.
func (s *Server) nxdomain(m *dns.Msg, apex string) {
	m.Rcode = dns.RcodeNameError
	m.Ns = append(m.Ns, s.soa(apex))
}

func (s *Server) hdr(name string, t uint16) dns.RR_Header {
	return dns.RR_Header{Name: name, Rrtype: t, Class: dns.ClassINET, Ttl: s.ttl}
}

// soa is the zone's SOA record, owned by apex. Its minimum (the negative
// caching TTL) is the TTL of every record.
func (s *Server) soa(apex string) dns.RR {
	return &dns.SOA{
		Hdr:     s.hdr(apex, dns.TypeSOA),
		Ns:      s.names.nsName,
		Mbox:    s.names.mbox,
		Serial:  s.index.generation.Load(),
		Refresh: soaRefresh,
		Retry:   soaRetry,
		Expire:  soaExpire,
		Minttl:  s.ttl,
	}
}

// addrRecords are the A (t A), AAAA (t AAAA) or both (t ANY) records of
// name for addrs; none for other types.
func (s *Server) addrRecords(name string, t uint16, addrs []netip.Addr) []dns.RR {
	var out []dns.RR
	for _, a := range addrs {
		switch {
		case a.Is4() && (t == dns.TypeA || t == dns.TypeANY):
			out = append(out, &dns.A{Hdr: s.hdr(name, dns.TypeA), A: a.AsSlice()})
		case a.Is6() && (t == dns.TypeAAAA || t == dns.TypeANY):
			out = append(out, &dns.AAAA{Hdr: s.hdr(name, dns.TypeAAAA), AAAA: a.AsSlice()})
		}
	}
	return out
}

// serviceAddrs are the addresses <svc>.<ns>.svc.<zone> resolves to, of the
// family of t (both for ANY): the ClusterSetIPs; or, for a headless service
// and for a ClusterSetIP service without ClusterSetIPs, the ready endpoint
// addresses in an order that turns with every answer (this cluster's
// endpoints first for the latter).
func (s *Server) serviceAddrs(svc *service, t uint16, turn func() uint64) []netip.Addr {
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
		if !svc.headless && e.cluster == s.cfg.LocalCluster {
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
func (s *Server) srv(m *dns.Msg, name string, svc *service, ports []servicePort, turn func() uint64) {
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
			add(p.number, s.serviceName(svc), func() []netip.Addr { return s.serviceAddrs(svc, dns.TypeANY, turn) })
			continue
		}
		for _, h := range svc.hosts {
			if target := s.hostName(svc, h.hostKey); len(target) <= maxNameLen {
				add(p.number, target, func() []netip.Addr { return h.addrs })
			}
		}
	}
	if len(records) == 0 {
		return
	}
	weight := uint16(max(1, 100/len(records)))
	for _, r := range records {
		m.Answer = append(m.Answer, &dns.SRV{Hdr: s.hdr(name, dns.TypeSRV), Priority: 0, Weight: weight, Port: r.port, Target: r.target})
	}
	for _, target := range extraOrder {
		m.Extra = append(m.Extra, s.addrRecords(target, dns.TypeANY, extra[target])...)
	}
}

// serviceName is <svc>.<ns>.svc.<zone>.
func (s *Server) serviceName(svc *service) string {
	return svc.name + "." + svc.namespace + ".svc." + s.names.origin
}

// hostName is <hostname>.<clusterid>.<svc>.<ns>.svc.<zone>.
func (s *Server) hostName(svc *service, h hostKey) string {
	return h.hostname + "." + h.cluster + "." + s.serviceName(svc)
}

// targetName is the name a PTR record points at.
func (s *Server) targetName(t ptrTarget) string {
	name := t.service + "." + t.namespace + ".svc." + s.names.origin
	if t.hostname != "" {
		name = t.hostname + "." + t.cluster + "." + name
	}
	return name
}
