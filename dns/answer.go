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

// answer fills m with the answer to question q, parsed as qn.
func (s *Server) answer(m *dns.Msg, q dns.Question, qn question) {
	m.Authoritative = true
	t := q.Qtype
	switch qn.kind {
	case kindNone:
		s.nxdomain(m)
	case kindApex:
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
			s.nxdomain(m)
		}
	case kindService:
		svc := s.index.service(qn.namespace, qn.service)
		switch {
		case svc == nil:
			s.nxdomain(m)
		case t == dns.TypeSRV:
			s.bareSRV(m, q.Name, svc)
		default:
			m.Answer = append(m.Answer, s.addrRecords(q.Name, t, s.serviceAddrs(svc, t))...)
		}
	case kindProto:
		if svc := s.index.service(qn.namespace, qn.service); svc == nil || !svc.hasProto(qn.proto) {
			s.nxdomain(m)
		}
	case kindPort:
		svc := s.index.service(qn.namespace, qn.service)
		if svc == nil {
			s.nxdomain(m)
			break
		}
		p, ok := svc.port(qn.port, qn.proto)
		if !ok {
			s.nxdomain(m)
			break
		}
		if t == dns.TypeSRV || t == dns.TypeANY {
			s.srv(m, q.Name, svc, []servicePort{p})
		}
	case kindCluster:
		// Above the hostnames of a cluster's endpoints, but with no records
		// of its own: the spec forbids names that single out one cluster's
		// backends.
		if svc := s.index.service(qn.namespace, qn.service); svc == nil || !svc.clusters[qn.cluster] {
			s.nxdomain(m)
		}
	case kindEndpoint:
		svc := s.index.service(qn.namespace, qn.service)
		if svc == nil {
			s.nxdomain(m)
			break
		}
		h, ok := svc.host(qn.hostname, qn.cluster)
		if !ok {
			s.nxdomain(m)
			break
		}
		m.Answer = append(m.Answer, s.addrRecords(q.Name, t, h.addrs)...)
	case kindReverse:
		owners := s.index.owners(qn.addr)
		if len(owners) == 0 {
			// Not an address this server serves: not authoritative.
			m.Authoritative = false
			m.Rcode = dns.RcodeRefused
			return
		}
		if t == dns.TypePTR || t == dns.TypeANY {
			// Only one PTR record may exist per address (the spec's
			// Limitations): an address two services share, such as a pod
			// behind two headless services, gets the first owner's name.
			m.Answer = append(m.Answer, &dns.PTR{Hdr: s.hdr(q.Name, dns.TypePTR), Ptr: s.targetName(owners[0])})
		}
		if len(m.Answer) == 0 {
			// The address is served, but not with that type. The server is
			// authoritative for this one name: it is its own apex.
			m.Ns = append(m.Ns, s.soa(strings.ToLower(q.Name)))
		}
		return
	}
	if m.Rcode == dns.RcodeSuccess && len(m.Answer) == 0 {
		// NODATA: the name exists, without records of that type.
		m.Ns = append(m.Ns, s.soa(s.names.origin))
	}
}

func (s *Server) nxdomain(m *dns.Msg) {
	m.Rcode = dns.RcodeNameError
	m.Ns = append(m.Ns, s.soa(s.names.origin))
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
		Mbox:    "hostmaster." + s.names.origin,
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
func (s *Server) serviceAddrs(svc *service, t uint16) []netip.Addr {
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
	turn := s.rotation.Add(1)
	return append(rotate(local, turn), rotate(remote, turn)...)
}

// rotate returns addrs starting at position turn (mod its length).
func rotate(addrs []netip.Addr, turn uint64) []netip.Addr {
	if len(addrs) < 2 {
		return addrs
	}
	k := int(turn % uint64(len(addrs)))
	return append(addrs[k:len(addrs):len(addrs)], addrs[:k]...)
}

// bareSRV answers an SRV query of <svc>.<ns>.svc.<zone>: every port of the
// service, one record per distinct (port number, target).
func (s *Server) bareSRV(m *dns.Msg, name string, svc *service) {
	s.srv(m, name, svc, svc.ports)
}

// srv adds the SRV records of the ports to m, each distinct (port number,
// target) once, with the targets' addresses in the additional section. A
// ClusterSetIP service's target is its own name; a headless service's
// targets are its endpoints' <hostname>.<clusterid> names.
func (s *Server) srv(m *dns.Msg, name string, svc *service, ports []servicePort) {
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
			add(p.number, s.serviceName(svc), func() []netip.Addr { return s.serviceAddrs(svc, dns.TypeANY) })
			continue
		}
		for _, h := range svc.hosts {
			add(p.number, s.hostName(svc, h.hostKey), func() []netip.Addr { return h.addrs })
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
