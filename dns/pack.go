package dns

import (
	"encoding/binary"
	"hash/maphash"
	"net/netip"
	"sync/atomic"

	"github.com/miekg/dns"
)

// Answers packed ahead of queries. When the Index publishes a service, the
// zone attached to it builds the answer to every question about the
// service's names (through answer, as for any query) and packs it once; the
// UDP fast path (fast.go) then answers by copying bytes. The packed answers
// are published beside the service, with the same atomic swap, so a query
// sees the old or the new answers, never half of them.

// headerLen is the length of a DNS message header.
const headerLen = 12

// slot is the position of a query type in a nameEntry.
type slot int

const (
	slotA slot = iota
	slotAAAA
	slotSRV
	slotPTR
	// slotOther answers every type without a slot of its own.
	slotOther
	nSlots
)

func slotOf(t uint16) slot {
	switch t {
	case dns.TypeA:
		return slotA
	case dns.TypeAAAA:
		return slotAAAA
	case dns.TypeSRV:
		return slotSRV
	case dns.TypePTR:
		return slotPTR
	}
	return slotOther
}

// otherType stands for the types of slotOther when answers are built.
const otherType = dns.TypeNULL

// nameEntry holds the packed answers of one name.
type nameEntry struct {
	answers [nSlots]*packedAnswer
}

// answer returns the packed answer to a question of type t, or nil when the
// fast path cannot give it.
func (e *nameEntry) answer(t uint16) *packedAnswer {
	a := e.answers[slotOf(t)]
	if a == nil {
		a = e.answers[slotOther]
	}
	if a == fullPath {
		return nil
	}
	return a
}

// fullPath stands in a nameEntry for an answer only the full path gives.
var fullPath = &packedAnswer{}

// packedAnswer is one answer, packed as the full path packs it for the
// question in lower case, with ID 0 and the RD and CD bits clear, without
// OPT. The question is copied from the query over it: it has the same
// length.
type packedAnswer struct {
	msg   []byte
	rcode int
	// serial is where the SOA serial is (0: no SOA): it is the Index's
	// generation when the answer is sent.
	serial int
	// rotate says that the answer turns (consuming a turn, as the full
	// path does), in groups of fixed-size records.
	rotate bool
	groups []recordGroup
	// pointers, for a template (nxTemplate), are the offsets of compression
	// pointers after the question that point into its zone suffix.
	pointers []int
}

// recordGroup is a run of n records of size bytes each, starting at off,
// that turns as one.
type recordGroup struct{ off, n, size int }

// nameTable maps names, as lower case wire format, to their entries. It is
// sharded copy-on-write maps: readers load a shard without locks, and the
// single writer (under the Index's mutex) copies only the shards it
// changes.
type nameTable struct {
	seed   maphash.Seed
	shards [256]atomic.Pointer[map[string]*nameEntry]
}

func newNameTable() *nameTable { return &nameTable{seed: maphash.MakeSeed()} }

func (t *nameTable) shard(key []byte) *atomic.Pointer[map[string]*nameEntry] {
	return &t.shards[maphash.Bytes(t.seed, key)%uint64(len(t.shards))]
}

// get returns the entry of a lower case wire-format name. It does not
// allocate.
func (t *nameTable) get(key []byte) *nameEntry {
	m := t.shard(key).Load()
	if m == nil {
		return nil
	}
	return (*m)[string(key)]
}

// update stores (nil: deletes) the entries of names, keyed by wire format,
// copying each touched shard once.
func (t *nameTable) update(changes map[string]*nameEntry) {
	byShard := map[*atomic.Pointer[map[string]*nameEntry]][]string{}
	for k := range changes {
		sh := t.shard([]byte(k))
		byShard[sh] = append(byShard[sh], k)
	}
	for sh, keys := range byShard {
		old := sh.Load()
		n := 0
		if old != nil {
			n = len(*old)
		}
		m := make(map[string]*nameEntry, n+len(keys))
		if old != nil {
			for k, v := range *old {
				m[k] = v
			}
		}
		for _, k := range keys {
			if e := changes[k]; e != nil {
				m[k] = e
			} else {
				delete(m, k)
			}
		}
		sh.Store(&m)
	}
}

// wireName is name (canonical, fully qualified, without escapes) in wire
// format.
func wireName(name string) string {
	b := make([]byte, len(name)+1)
	n, err := dns.PackDomainName(name, b, 0, nil, false)
	if err != nil {
		return ""
	}
	return string(b[:n])
}

// packTable is the Index's side of the packed answers: the table, the zone
// that packs them, and which names each service owns.
type packTable struct {
	table *nameTable
	zone  *zone
	names map[serviceKey][]string
}

// attach makes zn the packer of x's answers and packs every name x holds.
func (x *Index) attach(zn *zone) {
	x.mu.Lock()
	defer x.mu.Unlock()
	p := &packTable{table: newNameTable(), zone: zn, names: map[serviceKey][]string{}}
	changes := map[string]*nameEntry{}
	for key := range x.imports {
		x.repackService(p, key, changes)
	}
	for ns := range x.nsCount {
		name, e := zn.packNamespace(ns)
		changes[wireName(name)] = e
	}
	for a := range x.ptrOwners {
		name, e := zn.packReverse(a)
		changes[wireName(name)] = e
	}
	p.table.update(changes)
	x.packed.Store(p)
}

// repackService records in changes the new entries of a service's names,
// and the removal of names it no longer has. x.mu must be held.
func (x *Index) repackService(p *packTable, key serviceKey, changes map[string]*nameEntry) {
	var entries map[string]*nameEntry
	if svc, ok := x.services.load(key); ok && svc.exists() {
		entries = p.zone.packService(svc)
	}
	for _, old := range p.names[key] {
		if _, ok := entries[old]; !ok {
			changes[wireName(old)] = nil
		}
	}
	names := make([]string, 0, len(entries))
	for name, e := range entries {
		changes[wireName(name)] = e
		names = append(names, name)
	}
	if len(names) == 0 {
		delete(p.names, key)
	} else {
		p.names[key] = names
	}
}

// repack publishes the packed answers that a change of the service key
// touched: its names, the reverse names of the addresses in addrs, and its
// namespace's name when nsChanged. x.mu must be held.
func (x *Index) repack(key serviceKey, addrs map[netip.Addr]bool, nsChanged bool) {
	p := x.packed.Load()
	if p == nil {
		return
	}
	changes := map[string]*nameEntry{}
	x.repackService(p, key, changes)
	for a := range addrs {
		name, e := p.zone.packReverse(a)
		changes[wireName(name)] = e
	}
	if nsChanged {
		name, e := p.zone.packNamespace(key.namespace)
		changes[wireName(name)] = e
	}
	p.table.update(changes)
}

// packService packs the answers of every name of svc.
func (zn *zone) packService(svc *service) map[string]*nameEntry {
	out := map[string]*nameEntry{}
	base := zn.serviceName(svc)
	ns, name := svc.namespace, svc.name
	out[base] = zn.packName(base, question{kind: kindService, namespace: ns, service: name}, svc, dns.TypeA, dns.TypeAAAA, dns.TypeSRV)
	protos := map[string]bool{}
	for _, p := range svc.ports {
		if p.name == "" {
			continue
		}
		protos[p.proto] = true
		n := "_" + p.name + "._" + p.proto + "." + base
		out[n] = zn.packName(n, question{kind: kindPort, port: p.name, proto: p.proto, namespace: ns, service: name}, svc, dns.TypeSRV)
	}
	for proto := range protos {
		n := "_" + proto + "." + base
		out[n] = zn.packName(n, question{kind: kindProto, proto: proto, namespace: ns, service: name}, svc)
	}
	skipped := 0
	for cluster := range svc.clusters {
		n := cluster + "." + base
		out[n] = zn.packName(n, question{kind: kindCluster, cluster: cluster, namespace: ns, service: name}, svc)
	}
	for _, h := range svc.hosts {
		n := zn.hostName(svc, h.hostKey)
		if len(n) > maxNameLen {
			skipped++
			continue
		}
		out[n] = zn.packName(n, question{kind: kindEndpoint, hostname: h.hostname, cluster: h.cluster, namespace: ns, service: name}, svc, dns.TypeA, dns.TypeAAAA)
	}
	if skipped > 0 {
		zn.logger.Info("Leaving endpoint names longer than 253 characters out of DNS", "service", ns+"/"+name, "endpoints", skipped)
	}
	return out
}

func (zn *zone) packNamespace(namespace string) (string, *nameEntry) {
	n := namespace + ".svc." + zn.names.origin
	if !zn.index.hasNamespace(namespace) {
		return n, nil
	}
	return n, zn.packName(n, question{kind: kindNamespace, namespace: namespace}, nil)
}

func (zn *zone) packReverse(addr netip.Addr) (string, *nameEntry) {
	n := reverseName(addr)
	if _, ok := zn.ptrTarget(addr); !ok {
		return n, nil
	}
	qn := zn.names.parseReverse(n)
	return n, zn.packName(n, qn, nil, dns.TypePTR)
}

// packName packs the answers to questions of name: one for each of types,
// one for every other type.
func (zn *zone) packName(name string, qn question, svc *service, types ...uint16) *nameEntry {
	e := &nameEntry{}
	for _, t := range append(types, otherType) {
		a := zn.packAnswer(name, t, qn, svc)
		if a == nil {
			a = fullPath
		}
		e.answers[slotOf(t)] = a
	}
	return e
}

// packAnswer builds and packs the answer to one question as the full path
// would (unturned), or returns nil when the fast path cannot give it.
func (zn *zone) packAnswer(name string, t uint16, qn question, svc *service) *packedAnswer {
	m := new(dns.Msg)
	m.Response = true
	q := dns.Question{Name: name, Qtype: t, Qclass: dns.ClassINET}
	m.Question = []dns.Question{q}
	turns := 0
	zn.answer(m, q, qn, func() uint64 { turns++; return 0 })
	m.Compress = true
	b, err := m.Pack()
	if err != nil || len(b)+optLen > zn.maxUDPSize || turns > 1 {
		// Too big for the fast path, which never truncates.
		return nil
	}
	a := &packedAnswer{msg: b, rcode: m.Rcode, serial: soaSerialOffset(b)}
	if turns == 1 {
		if !zn.turnGroups(a, m, svc, t) {
			return nil
		}
	}
	return a
}

// turnGroups fills in how a packed multi-address answer of a service name
// turns, as serviceAddrs turns it: all of a headless service's records as
// one group; the local and the remote records of a ClusterSetIP service
// without ClusterSetIPs as two. It says false when the answer is not of
// that shape (such as an SRV answer whose glue turns).
func (zn *zone) turnGroups(a *packedAnswer, m *dns.Msg, svc *service, t uint16) bool {
	size := 2 + 10 + 4 // compressed owner, type, class, TTL, length, IPv4
	if t == dns.TypeAAAA {
		size += 12
	} else if t != dns.TypeA {
		return false
	}
	n := len(m.Answer)
	off := len(a.msg) - n*size
	if svc == nil || len(m.Ns)+len(m.Extra) > 0 || off < headerLen {
		return false
	}
	local := 0
	if !svc.headless {
		for _, rr := range m.Answer {
			if a, ok := netip.AddrFromSlice(rrAddr(rr)); ok && isLocal(svc, a.Unmap(), zn.localCluster) {
				local++
			}
		}
	}
	a.rotate = true
	for _, g := range []recordGroup{{off, local, size}, {off + local*size, n - local, size}} {
		if g.n > 1 {
			a.groups = append(a.groups, g)
		}
	}
	return true
}

func rrAddr(rr dns.RR) []byte {
	switch rr := rr.(type) {
	case *dns.A:
		return rr.A
	case *dns.AAAA:
		return rr.AAAA
	}
	return nil
}

// isLocal says whether addr is an endpoint of svc in the cluster local.
func isLocal(svc *service, addr netip.Addr, local string) bool {
	for _, e := range svc.endpoints {
		if e.addr == addr {
			return e.cluster == local
		}
	}
	return false
}

// optLen is the length of the OPT record of an answer: root name, type,
// class (the buffer size), TTL (extended rcode, version, flags), no data.
const optLen = 1 + 2 + 2 + 4 + 2

// soaSerialOffset returns the offset of the serial of the SOA record in
// the packed message b, or 0 when it has none.
func soaSerialOffset(b []byte) int {
	off := headerLen
	qd := int(binary.BigEndian.Uint16(b[4:]))
	rrs := int(binary.BigEndian.Uint16(b[6:])) + int(binary.BigEndian.Uint16(b[8:])) + int(binary.BigEndian.Uint16(b[10:]))
	for range qd {
		off = skipName(b, off) + 4
	}
	for range rrs {
		off = skipName(b, off)
		if off+10 > len(b) {
			return 0
		}
		t := binary.BigEndian.Uint16(b[off:])
		rdlen := int(binary.BigEndian.Uint16(b[off+8:]))
		rdata := off + 10
		if t == dns.TypeSOA {
			return skipName(b, skipName(b, rdata))
		}
		off = rdata + rdlen
	}
	return 0
}

// skipName returns the offset after the (possibly compressed) name at off.
func skipName(b []byte, off int) int { return namePointers(b, off, nil) }

// namePointers calls f (unless nil) with the offset of the compression
// pointer that ends the name at off, if any, and returns the offset after
// the name.
func namePointers(b []byte, off int, f func(int)) int {
	for off < len(b) {
		l := int(b[off])
		switch {
		case l == 0:
			return off + 1
		case l&0xC0 == 0xC0:
			if f != nil {
				f(off)
			}
			return off + 2
		}
		off += 1 + l
	}
	return len(b)
}
