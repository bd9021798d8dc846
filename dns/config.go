package dns

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/klog/v2"
)

// Defaults of Config fields left empty.
const (
	DefaultZone = "clusterset.local."
	DefaultTTL  = 5 * time.Second
	// DefaultMaxUDPSize is the largest UDP answer sent, and the EDNS0 buffer
	// size advertised: 1232 bytes fits any path MTU without fragmentation
	// (the DNS Flag Day 2020 value). Larger answers are truncated (TC set)
	// and clients retry over TCP.
	DefaultMaxUDPSize = 1232
	// defaultNSLabels is prepended to the zone for the default NS target.
	defaultNSLabels = "ns.dns."
)

// Config is what a Server needs. Index is required; everything else has a
// default.
type Config struct {
	// Zone is the clusterset zone (default "clusterset.local.").
	Zone string
	// TTL of every record, and of negative answers (default 5s).
	TTL time.Duration
	// LocalCluster is this cluster's ID. Answers made of endpoint addresses
	// of a ClusterSetIP service without ClusterSetIPs list this cluster's
	// endpoints first.
	LocalCluster string
	// Listen is the address Run listens on, over UDP and TCP
	// (default "127.0.0.1:5353").
	Listen string
	// NSName is the name server at the zone apex, the NS record's target and
	// the SOA's MNAME (default "ns.dns.<zone>"). When it is inside the zone,
	// the name is answered with NSAddresses.
	NSName string
	// NSAddresses are the addresses of NSName, answered when NSName is in
	// the zone (none by default: NODATA).
	NSAddresses []netip.Addr
	// ReverseCIDRs are the address ranges whose reverse zones (under
	// in-addr.arpa and ip6.arpa) the server is authoritative for: the
	// clusterset CIDRs, and any range of endpoint addresses whose PTR records
	// it should answer. In those zones an address nobody serves is NXDOMAIN
	// and negative answers carry the zone's SOA. A range that does not end
	// on a label boundary (an octet for IPv4, a nibble for IPv6) gets the
	// zone that encloses it: 10.96.0.0/12 -> 10.in-addr.arpa. Outside them
	// only the served addresses' own reverse names are answered; other
	// reverse names are REFUSED.
	ReverseCIDRs []netip.Prefix
	// MaxUDPSize is the largest answer sent over UDP (default
	// DefaultMaxUDPSize, at least 512).
	MaxUDPSize int
	// Index holds the records to serve (required).
	Index *Index
	// Registerer receives the server's metrics (none registered when nil).
	Registerer prometheus.Registerer
	// Logger (default klog.Background()).
	Logger klog.Logger
}

// withDefaults returns cfg with defaults filled in and names canonical
// (lower case, fully qualified), or an error naming the bad field.
func (cfg Config) withDefaults() (Config, error) {
	if cfg.Index == nil {
		return cfg, fmt.Errorf("dns: Config.Index is required")
	}
	if cfg.Zone == "" {
		cfg.Zone = DefaultZone
	}
	cfg.Zone = dns.CanonicalName(cfg.Zone)
	if _, ok := dns.IsDomainName(cfg.Zone); !ok || cfg.Zone == "." || strings.Contains(cfg.Zone, `\`) {
		return cfg, fmt.Errorf("dns: zone %q is not a domain name; use a name such as %q", cfg.Zone, DefaultZone)
	}
	if dns.IsSubDomain("in-addr.arpa.", cfg.Zone) || dns.IsSubDomain("ip6.arpa.", cfg.Zone) {
		return cfg, fmt.Errorf("dns: zone %q is a reverse zone; the reverse names of served addresses are answered anyway", cfg.Zone)
	}
	if cfg.TTL == 0 {
		cfg.TTL = DefaultTTL
	}
	if cfg.TTL < time.Second || cfg.TTL > 24*time.Hour {
		return cfg, fmt.Errorf("dns: TTL %v is out of range; use 1s to 24h", cfg.TTL)
	}
	if cfg.Listen == "" {
		cfg.Listen = "127.0.0.1:5353"
	}
	if cfg.NSName == "" {
		cfg.NSName = defaultNSLabels + cfg.Zone
	}
	cfg.NSName = dns.CanonicalName(cfg.NSName)
	if _, ok := dns.IsDomainName(cfg.NSName); !ok || strings.Contains(cfg.NSName, `\`) {
		return cfg, fmt.Errorf("dns: NS name %q is not a domain name", cfg.NSName)
	}
	if dns.IsSubDomain("svc."+cfg.Zone, cfg.NSName) || cfg.NSName == versionLabel+"."+cfg.Zone || cfg.NSName == cfg.Zone {
		return cfg, fmt.Errorf("dns: NS name %q collides with the names of the zone %q; use a name such as %q", cfg.NSName, cfg.Zone, defaultNSLabels+cfg.Zone)
	}
	for _, a := range cfg.NSAddresses {
		if !a.IsValid() || a.Zone() != "" {
			return cfg, fmt.Errorf("dns: NS address %v is not a plain IP address", a)
		}
	}
	for _, p := range cfg.ReverseCIDRs {
		if !p.IsValid() || p.Addr().Zone() != "" || (p.Addr().Is4() && p.Bits() < 8) || (p.Addr().Is6() && p.Bits() < 4) {
			return cfg, fmt.Errorf("dns: reverse CIDR %v is not a range of at least /8 (IPv4) or /4 (IPv6)", p)
		}
	}
	if cfg.MaxUDPSize == 0 {
		cfg.MaxUDPSize = DefaultMaxUDPSize
	}
	if cfg.MaxUDPSize < dns.MinMsgSize || cfg.MaxUDPSize > dns.MaxMsgSize {
		return cfg, fmt.Errorf("dns: MaxUDPSize %d is out of range; use %d to %d", cfg.MaxUDPSize, dns.MinMsgSize, dns.MaxMsgSize)
	}
	if cfg.LocalCluster != "" {
		if _, ok := dns.IsDomainName(cfg.LocalCluster); !ok || strings.ContainsAny(cfg.LocalCluster, `.\`) {
			return cfg, fmt.Errorf("dns: local cluster ID %q is not a DNS label", cfg.LocalCluster)
		}
	}
	if cfg.Logger.GetSink() == nil {
		cfg.Logger = klog.Background()
	}
	return cfg, nil
}

// reverseZones are the apexes of the reverse zones of cfg.ReverseCIDRs,
// each once, longest (innermost) first.
func (cfg Config) reverseZones() []string {
	var out []string
	for _, p := range cfg.ReverseCIDRs {
		if z := ReverseZone(p); !slices.Contains(out, z) {
			out = append(out, z)
		}
	}
	slices.SortFunc(out, func(a, b string) int { return cmp.Or(cmp.Compare(len(b), len(a)), cmp.Compare(a, b)) })
	return out
}
