package dns

import (
	"net/netip"
	"strconv"
	"strings"

	"github.com/miekg/dns"
)

// Step one of answering: what a question name asks about.

// versionLabel names the schema version record, dns-version.<zone>.
const versionLabel = "dns-version"

// nameKind is the kind of name a question asks about.
type nameKind int

const (
	// kindOutside: not a name this server is authoritative for (REFUSED).
	kindOutside nameKind = iota
	// kindNone: in the zone, but no name of this shape can exist (NXDOMAIN).
	kindNone
	// kindApex: <zone>, with its SOA and NS records.
	kindApex
	// kindVersion: dns-version.<zone>, the schema version TXT record.
	kindVersion
	// kindNameServer: the NS target, when it is in the zone.
	kindNameServer
	// kindEmpty: a name above the NS target in the zone; it has no records.
	kindEmpty
	// kindServices: svc.<zone>, above every service; it has no records.
	kindServices
	// kindNamespace: <ns>.svc.<zone>; it has no records.
	kindNamespace
	// kindService: <svc>.<ns>.svc.<zone>.
	kindService
	// kindProto: _<proto>.<svc>.<ns>.svc.<zone>, above the SRV names.
	kindProto
	// kindPort: _<port>._<proto>.<svc>.<ns>.svc.<zone>, a named port's SRV.
	kindPort
	// kindCluster: <clusterid>.<svc>.<ns>.svc.<zone>, above the hostnames of
	// a headless service's endpoints in that cluster; it has no records.
	kindCluster
	// kindEndpoint: <hostname>.<clusterid>.<svc>.<ns>.svc.<zone>.
	kindEndpoint
	// kindReverse: the full in-addr.arpa or ip6.arpa name of an address.
	kindReverse
	// kindReverseApex: the apex of a reverse zone the server is
	// authoritative for, with its SOA and NS records.
	kindReverseApex
	// kindReverseAbove: a partial reverse name inside a reverse zone, between
	// its apex and the names of addresses; it exists when a served address
	// is below it.
	kindReverseAbove
)

// question is a parsed question name. Which fields are set depends on kind.
type question struct {
	kind      nameKind
	namespace string
	service   string
	cluster   string
	hostname  string
	port      string // port name, without the leading underscore
	proto     string // "tcp", "udp" or "sctp", without the leading underscore
	addr      netip.Addr
	// prefix is the range a kindReverseAbove name stands for.
	prefix netip.Prefix
	// zone is the apex of the reverse zone a reverse name is in (empty when
	// it is in none of them); negative answers carry its SOA.
	zone string
}

// zoneNames are the names that do not depend on the Index.
type zoneNames struct {
	origin  string          // the zone, canonical
	suffix  string          // "." + origin
	nsName  string          // the NS target, canonical
	mbox    string          // the SOA's RNAME, hostmaster.<origin>
	nsIn    bool            // whether nsName is in the zone
	nsAbove map[string]bool // names strictly between origin and nsName
	// reverse are the apexes of the reverse zones the server is
	// authoritative for, canonical, longest first.
	reverse []string
}

func newZoneNames(origin, nsName string, reverse []string) zoneNames {
	z := zoneNames{origin: origin, suffix: "." + origin, nsName: nsName, nsAbove: map[string]bool{}, reverse: reverse, mbox: "hostmaster." + origin}
	z.nsIn = dns.IsSubDomain(origin, nsName)
	if z.nsIn {
		for off, end := dns.NextLabel(nsName, 0); !end; off, end = dns.NextLabel(nsName, off) {
			if above := nsName[off:]; above != origin && dns.IsSubDomain(origin, above) {
				z.nsAbove[above] = true
			}
		}
	}
	return z
}

// parse says what the canonical (lower case, fully qualified) name asks
// about.
func (z *zoneNames) parse(name string) question {
	if name == z.origin {
		return question{kind: kindApex}
	}
	if z.nsIn && name == z.nsName {
		return question{kind: kindNameServer}
	}
	if z.nsAbove[name] {
		return question{kind: kindEmpty}
	}
	if strings.Contains(name, `\`) {
		// Kubernetes names never hold escaped characters; decide only
		// whether the name is ours.
		if dns.IsSubDomain(z.origin, name) {
			return question{kind: kindNone}
		}
		return question{kind: kindOutside}
	}
	if !strings.HasSuffix(name, z.suffix) {
		return z.parseReverse(name)
	}
	labels := strings.Split(name[:len(name)-len(z.suffix)], ".")
	n := len(labels)
	if n == 1 && labels[0] == versionLabel {
		return question{kind: kindVersion}
	}
	if labels[n-1] != "svc" {
		return question{kind: kindNone}
	}
	switch n {
	case 1:
		return question{kind: kindServices}
	case 2:
		return question{kind: kindNamespace, namespace: labels[0]}
	case 3:
		return question{kind: kindService, service: labels[0], namespace: labels[1]}
	case 4:
		if proto, ok := strings.CutPrefix(labels[0], "_"); ok {
			return question{kind: kindProto, proto: proto, service: labels[1], namespace: labels[2]}
		}
		return question{kind: kindCluster, cluster: labels[0], service: labels[1], namespace: labels[2]}
	case 5:
		port, isPort := strings.CutPrefix(labels[0], "_")
		proto, isProto := strings.CutPrefix(labels[1], "_")
		switch {
		case isPort && isProto:
			return question{kind: kindPort, port: port, proto: proto, service: labels[2], namespace: labels[3]}
		case !isPort && !isProto:
			return question{kind: kindEndpoint, hostname: labels[0], cluster: labels[1], service: labels[2], namespace: labels[3]}
		}
	}
	return question{kind: kindNone}
}

const (
	reverseV4 = ".in-addr.arpa."
	reverseV6 = ".ip6.arpa."
)

// parseReverse parses a reverse name. Inside a reverse zone of the server
// every name is answered: the apex, partial names above the addresses, the
// full names of addresses (four decimal labels under in-addr.arpa, 32
// nibbles under ip6.arpa), and NXDOMAIN for anything else. Outside them only
// the full name of an address is answered, and only while it is served.
func (z *zoneNames) parseReverse(name string) question {
	zone := z.reverseZoneOf(name)
	p, ok := parseReverseName(name)
	switch {
	case zone == "" && ok && p.IsSingleIP():
		return question{kind: kindReverse, addr: p.Addr()}
	case zone == "":
		return question{kind: kindOutside}
	case !ok:
		return question{kind: kindNone, zone: zone}
	case name == zone:
		return question{kind: kindReverseApex, zone: zone}
	case p.IsSingleIP():
		return question{kind: kindReverse, addr: p.Addr(), zone: zone}
	}
	return question{kind: kindReverseAbove, prefix: p, zone: zone}
}

// reverseZoneOf returns the apex of the innermost reverse zone holding name,
// or "".
func (z *zoneNames) reverseZoneOf(name string) string {
	for _, apex := range z.reverse {
		if name == apex || (strings.HasSuffix(name, apex) && name[len(name)-len(apex)-1] == '.') {
			return apex
		}
	}
	return ""
}

// parseReverseName parses a reverse name, full or partial, into the range
// it stands for: one to four decimal labels under in-addr.arpa (without
// leading zeros), one to 32 nibble labels under ip6.arpa. The arpa names
// themselves (zero labels) are not ranges.
func parseReverseName(name string) (netip.Prefix, bool) {
	if rest, ok := strings.CutSuffix(name, reverseV4); ok {
		var b [4]byte
		n := strings.Count(rest, ".") + 1
		if n > 4 {
			return netip.Prefix{}, false
		}
		for i := n - 1; i >= 0; i-- {
			l, after, _ := strings.Cut(rest, ".")
			rest = after
			v, ok := parseOctet(l)
			if !ok {
				return netip.Prefix{}, false
			}
			b[i] = v
		}
		return netip.PrefixFrom(netip.AddrFrom4(b), 8*n), true
	}
	if rest, ok := strings.CutSuffix(name, reverseV6); ok {
		// n nibbles and n-1 dots.
		if len(rest)%2 != 1 || len(rest) > 63 {
			return netip.Prefix{}, false
		}
		n := (len(rest) + 1) / 2
		var b [16]byte
		for i := 0; i < n; i++ {
			if i < n-1 && rest[2*i+1] != '.' {
				return netip.Prefix{}, false
			}
			v, ok := parseNibble(rest[2*i])
			if !ok {
				return netip.Prefix{}, false
			}
			// The first label is the last nibble of the range.
			pos := n - 1 - i
			if pos%2 == 0 {
				b[pos/2] |= v << 4
			} else {
				b[pos/2] |= v
			}
		}
		return netip.PrefixFrom(netip.AddrFrom16(b), 4*n), true
	}
	return netip.Prefix{}, false
}

// parseOctet parses a decimal label 0-255 written without leading zeros.
func parseOctet(l string) (byte, bool) {
	if l == "" || len(l) > 3 || (len(l) > 1 && l[0] == '0') {
		return 0, false
	}
	v := 0
	for i := 0; i < len(l); i++ {
		if l[i] < '0' || l[i] > '9' {
			return 0, false
		}
		v = v*10 + int(l[i]-'0')
	}
	if v > 255 {
		return 0, false
	}
	return byte(v), true
}

func parseNibble(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	}
	return 0, false
}

// reverseName is the full reverse name of addr, the owner of its PTR record.
func reverseName(addr netip.Addr) string {
	if addr.Is4() {
		b := addr.As4()
		var sb strings.Builder
		for i := 3; i >= 0; i-- {
			sb.WriteString(strconv.Itoa(int(b[i])))
			sb.WriteByte('.')
		}
		sb.WriteString(reverseV4[1:])
		return sb.String()
	}
	const hex = "0123456789abcdef"
	b := addr.As16()
	out := make([]byte, 0, 64+len(reverseV6)-1)
	for i := 15; i >= 0; i-- {
		out = append(out, hex[b[i]&0xf], '.', hex[b[i]>>4], '.')
	}
	return string(out) + reverseV6[1:]
}

// ReverseZone is the apex of the reverse zone of p: the name of its first
// bits, rounded down to whole labels (octets under in-addr.arpa, nibbles
// under ip6.arpa), so a range off a label boundary gets the zone that
// encloses it.
func ReverseZone(p netip.Prefix) string {
	p = p.Masked()
	var sb strings.Builder
	if p.Addr().Is4() {
		b := p.Addr().As4()
		for i := p.Bits()/8 - 1; i >= 0; i-- {
			sb.WriteString(strconv.Itoa(int(b[i])))
			sb.WriteByte('.')
		}
		sb.WriteString(reverseV4[1:])
		return sb.String()
	}
	const hex = "0123456789abcdef"
	b := p.Addr().As16()
	for i := p.Bits()/4 - 1; i >= 0; i-- {
		v := b[i/2]
		if i%2 == 0 {
			v >>= 4
		}
		sb.WriteByte(hex[v&0xf])
		sb.WriteByte('.')
	}
	sb.WriteString(reverseV6[1:])
	return sb.String()
}

// reverseAncestors calls f with every partial reverse range above addr:
// /8, /16, /24 for IPv4, /4 to /124 for IPv6.
func reverseAncestors(addr netip.Addr, f func(netip.Prefix)) {
	step := 8
	if addr.Is6() {
		step = 4
	}
	for bits := step; bits < addr.BitLen(); bits += step {
		p, _ := addr.Prefix(bits)
		f(p)
	}
}
