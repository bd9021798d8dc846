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
}

// zoneNames are the names that do not depend on the Index.
type zoneNames struct {
	origin  string          // the zone, canonical
	suffix  string          // "." + origin
	nsName  string          // the NS target, canonical
	nsIn    bool            // whether nsName is in the zone
	nsAbove map[string]bool // names strictly between origin and nsName
}

func newZoneNames(origin, nsName string) zoneNames {
	z := zoneNames{origin: origin, suffix: "." + origin, nsName: nsName, nsAbove: map[string]bool{}}
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
		return parseReverse(name)
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

// parseReverse parses the full reverse name of one address (four decimal
// labels under in-addr.arpa, 32 nibbles under ip6.arpa). Anything else,
// shorter reverse names included, is outside what this server answers.
func parseReverse(name string) question {
	if rest, ok := strings.CutSuffix(name, reverseV4); ok {
		var b [4]byte
		labels := strings.Split(rest, ".")
		if len(labels) != 4 {
			return question{kind: kindOutside}
		}
		for i, l := range labels {
			v, ok := parseOctet(l)
			if !ok {
				return question{kind: kindOutside}
			}
			b[3-i] = v
		}
		return question{kind: kindReverse, addr: netip.AddrFrom4(b)}
	}
	if rest, ok := strings.CutSuffix(name, reverseV6); ok {
		// 32 nibbles and 31 dots.
		if len(rest) != 63 {
			return question{kind: kindOutside}
		}
		var b [16]byte
		for i := 0; i < 32; i++ {
			if i < 31 && rest[2*i+1] != '.' {
				return question{kind: kindOutside}
			}
			v, ok := parseNibble(rest[2*i])
			if !ok {
				return question{kind: kindOutside}
			}
			// The first label is the lowest nibble of the last byte.
			pos := 31 - i
			if pos%2 == 0 {
				b[pos/2] |= v << 4
			} else {
				b[pos/2] |= v
			}
		}
		return question{kind: kindReverse, addr: netip.AddrFrom16(b)}
	}
	return question{kind: kindOutside}
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
