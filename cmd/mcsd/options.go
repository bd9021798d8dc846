package main

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/mcsd-io/mcsd/broker"
	"github.com/mcsd-io/mcsd/clusterid"
	"github.com/mcsd-io/mcsd/clustersetip"
	"github.com/mcsd-io/mcsd/dns"
	"github.com/mcsd-io/mcsd/importer"
	"github.com/mcsd-io/mcsd/proxier"
)

// The components one mcsd process can run.
const (
	componentExporter = "exporter"
	componentImporter = "importer"
	componentDNS      = "dns"
	componentProxier  = "proxier"
)

var allComponents = []string{componentExporter, componentImporter, componentDNS, componentProxier}

// options are the daemon's flags, parsed and validated.
type options struct {
	components []string

	kubeconfig       string
	brokerKubeconfig string
	brokerSecret     string
	brokerNamespace  string
	clientQPS        float64
	clientBurst      int

	clusterID  string
	clusterSet string

	clusterSetIPs       bool
	clusterSetCIDRs     []netip.Prefix
	clusterVIPCIDRs     []netip.Prefix
	vipBlockBitsV4      int
	vipBlockBitsV6      int
	leaseDuration       time.Duration
	clusterTTL          time.Duration
	leaderElect         bool
	leaderElectNS       string
	profiling           bool
	leaderElectLease    time.Duration
	leaderElectRenew    time.Duration
	leaderElectRetry    time.Duration
	leaderElectID       string
	exporterWorkers     int
	importerWorkers     int
	controllerResync    time.Duration
	shutdownGracePeriod time.Duration

	// The importer's defences against other members.
	importDeniedNamespaces []string
	maxServicesPerCluster  int
	goneClusterGrace       time.Duration

	dnsListen     string
	dnsZone       string
	dnsTTL        time.Duration
	netns         string
	nodeName      string
	ipFamilies    []corev1.IPFamily
	proxierMode   proxier.Mode
	minSync       time.Duration
	syncPeriod    time.Duration
	fullSync      time.Duration
	masqMark      uint32
	masqAll       bool
	podCIDRs      []string
	preferLocal   bool
	healthTimeout time.Duration

	// dnsReverseCIDRs are ranges, besides clusterSetCIDRs, whose reverse
	// zones the DNS server is authoritative for.
	dnsReverseCIDRs []netip.Prefix

	metricsAddress string
	healthAddress  string
}

// rawFlags holds flag values that need parsing after flag.Parse.
type rawFlags struct {
	components, clusterSetCIDRs, clusterVIPCIDRs, ipFamilies, podCIDRs, masqMark, proxierMode string

	importDeniedNamespaces string

	dnsReverseCIDRs string
}

func (o *options) register(fs *flag.FlagSet) *rawFlags {
	raw := &rawFlags{}
	fs.StringVar(&raw.components, "components", strings.Join(allComponents, ","), "comma-separated components to run: "+strings.Join(allComponents, ", "))

	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig of the local cluster; empty means in-cluster configuration")
	fs.StringVar(&o.brokerKubeconfig, "broker-kubeconfig", "", "kubeconfig of the broker (this cluster's broker identity)")
	fs.StringVar(&o.brokerSecret, "broker-secret", "", "NAMESPACE/NAME of a Secret in the local cluster whose key \"kubeconfig\" is the broker kubeconfig (instead of --broker-kubeconfig)")
	fs.StringVar(&o.brokerNamespace, "broker-namespace", broker.DefaultNamespace, "namespace on the broker that holds every cluster's records")
	fs.Float64Var(&o.clientQPS, "kube-api-qps", 500, "queries per second of each of mcsd's clients")
	fs.IntVar(&o.clientBurst, "kube-api-burst", 1000, "burst of queries of each of mcsd's clients")

	fs.StringVar(&o.clusterID, "cluster-id", "", "this cluster's ID (an RFC 1123 label); empty means the cluster.clusterset.k8s.io ClusterProperty, created from the kube-system namespace UID when absent")
	fs.StringVar(&o.clusterSet, "clusterset", "clusterset", "name of the ClusterSet this cluster joins (recorded as the clusterset.k8s.io ClusterProperty)")

	fs.BoolVar(&o.clusterSetIPs, "clusterset-ip", true, "give exported ClusterSetIP services a clusterset VIP (a ServiceExport's annotation "+"mcsd.io/clusterset-ip overrides it)")
	fs.StringVar(&raw.clusterSetCIDRs, "clusterset-cidrs", clustersetip.DefaultClusterSetCIDRv4.String()+","+clustersetip.DefaultClusterSetCIDRv6.String(), "clusterset VIP ranges, at most one per IP family")
	fs.StringVar(&raw.clusterVIPCIDRs, "cluster-vip-cidrs", "", "this cluster's VIP blocks inside --clusterset-cidrs, at most one per family; empty means the first free block of --vip-block-bits")
	fs.IntVar(&o.vipBlockBitsV4, "vip-block-bits-ipv4", clustersetip.DefaultBlockBitsV4, "prefix length of the IPv4 VIP block a cluster claims when --cluster-vip-cidrs has none")
	fs.IntVar(&o.vipBlockBitsV6, "vip-block-bits-ipv6", clustersetip.DefaultBlockBitsV6, "prefix length of the IPv6 VIP block a cluster claims when --cluster-vip-cidrs has none")
	fs.DurationVar(&o.leaseDuration, "lease-duration", 10*time.Second, "duration of this cluster's heartbeat Lease on the broker; it is renewed every fifth of it")
	fs.DurationVar(&o.clusterTTL, "cluster-ttl", 10*time.Second, "a cluster whose broker Lease has not been renewed for this long is gone: its endpoints leave every importing cluster")

	fs.BoolVar(&o.leaderElect, "leader-elect", true, "run the exporter and importer only in the elected replica (a Lease in the local cluster)")
	fs.StringVar(&o.leaderElectNS, "leader-elect-namespace", "mcsd-system", "namespace of the leader-election Lease")
	fs.StringVar(&o.leaderElectID, "leader-elect-identity", "", "this replica's identity in leader election; empty means the node name and process ID")
	fs.DurationVar(&o.leaderElectLease, "leader-elect-lease-duration", 15*time.Second, "leader-election lease duration")
	fs.DurationVar(&o.leaderElectRenew, "leader-elect-renew-deadline", 10*time.Second, "leader-election renew deadline")
	fs.DurationVar(&o.leaderElectRetry, "leader-elect-retry-period", 2*time.Second, "leader-election retry period")
	fs.IntVar(&o.exporterWorkers, "exporter-workers", 4, "services the exporter syncs at once")
	fs.IntVar(&o.importerWorkers, "importer-workers", 4, "services the importer syncs at once")
	fs.StringVar(&raw.importDeniedNamespaces, "import-namespace-denylist", "kube-system", "comma-separated namespaces whose services this cluster never imports, whoever exports them; empty denies none")
	fs.IntVar(&o.maxServicesPerCluster, "max-services-per-cluster", importer.DefaultMaxServicesPerCluster, "most export records one cluster may contribute; the importer ignores its newest beyond that")
	fs.DurationVar(&o.goneClusterGrace, "gone-cluster-grace", importer.DefaultGoneClusterGrace, "how long the records of a cluster whose Lease is dead (or absent) still decide the services' type, ports and ClusterSetIPs")
	fs.DurationVar(&o.controllerResync, "controller-resync-period", 10*time.Minute, "how often the exporter and importer re-check every service")
	fs.DurationVar(&o.shutdownGracePeriod, "shutdown-grace-period", 5*time.Second, "time components get to stop after SIGTERM")

	fs.StringVar(&o.dnsListen, "dns-listen", ":5353", "address the clusterset DNS server listens on, UDP and TCP")
	fs.StringVar(&o.dnsZone, "dns-zone", dns.DefaultZone, "the clusterset DNS zone")
	fs.DurationVar(&o.dnsTTL, "dns-ttl", dns.DefaultTTL, "TTL of DNS answers")
	fs.StringVar(&raw.dnsReverseCIDRs, "dns-reverse-cidrs", "", "comma-separated ranges whose reverse zones (in-addr.arpa, ip6.arpa) the DNS server is authoritative for besides --clusterset-cidrs', such as every cluster's pod CIDRs for the PTR records of headless endpoints; forward their zones to it too")
	fs.StringVar(&o.netns, "netns", "", "path of the network namespace (such as /run/netns/NAME) where the proxier programs nftables and the DNS server listens; empty means the daemon's own")

	fs.StringVar(&o.nodeName, "node-name", os.Getenv("NODE_NAME"), "this node's name (default $NODE_NAME); internalTrafficPolicy Local prefers its endpoints")
	fs.StringVar(&raw.ipFamilies, "ip-families", "IPv4,IPv6", "IP families the proxier programs")
	fs.StringVar(&raw.proxierMode, "proxier-mode", string(proxier.ModeNFTables), "how the proxier programs the node: nftables, iptables (for kernels or nft too old for nftables), or auto (nftables when the kernel and nft support it, else iptables)")
	fs.DurationVar(&o.minSync, "proxier-min-sync-period", proxier.DefaultMinSyncPeriod, "least time between two proxier syncs")
	fs.DurationVar(&o.syncPeriod, "proxier-sync-period", proxier.DefaultSyncPeriod, "most time between two proxier syncs")
	fs.DurationVar(&o.fullSync, "proxier-full-sync-period", proxier.DefaultFullSyncPeriod, "how often the proxier counts the rules of each of its chains and rewrites those changed behind its back")
	fs.StringVar(&raw.masqMark, "masquerade-mark", fmt.Sprintf("%#x", proxier.DefaultMasqueradeMark), "the single packet-mark bit that flags traffic to masquerade")
	fs.BoolVar(&o.masqAll, "masquerade-all", false, "masquerade all traffic to ClusterSetIPs")
	fs.StringVar(&raw.podCIDRs, "pod-cidrs", "", "this cluster's pod CIDRs; traffic to a ClusterSetIP from other sources is masqueraded")
	fs.BoolVar(&o.preferLocal, "prefer-local-cluster", false, "prefer the local cluster's endpoints for every ClusterSetIP, as trafficDistribution PreferClose does")
	fs.DurationVar(&o.healthTimeout, "proxier-healthz-timeout", time.Minute, "the proxier is unhealthy when a queued update has not been applied for this long")

	fs.StringVar(&o.metricsAddress, "metrics-address", ":9090", "address of the Prometheus /metrics endpoint; empty disables it")
	fs.BoolVar(&o.profiling, "profiling", false, "serve Go's profiles under /debug/pprof/ on --metrics-address")
	fs.StringVar(&o.healthAddress, "health-address", ":9091", "address of /healthz, /readyz and /livez; empty disables them")
	return raw
}

// complete parses the raw flags and checks every value, naming the flag at
// fault.
func (o *options) complete(raw *rawFlags) error {
	var errs []error
	bad := func(flagName, format string, args ...any) {
		errs = append(errs, fmt.Errorf("--%s: %s", flagName, fmt.Sprintf(format, args...)))
	}

	o.components = nil
	for _, c := range splitList(raw.components) {
		if !slices.Contains(allComponents, c) {
			bad("components", "unknown component %q; choose from %s", c, strings.Join(allComponents, ", "))
			continue
		}
		if !slices.Contains(o.components, c) {
			o.components = append(o.components, c)
		}
	}
	if len(o.components) == 0 {
		bad("components", "no component to run")
	}

	if o.runsControllers() {
		if o.brokerKubeconfig == "" && o.brokerSecret == "" {
			bad("broker-kubeconfig", "the exporter and importer need the broker: give --broker-kubeconfig or --broker-secret")
		}
		if o.brokerKubeconfig != "" && o.brokerSecret != "" {
			bad("broker-secret", "give either --broker-kubeconfig or --broker-secret, not both")
		}
		if o.brokerSecret != "" {
			if ns, name, ok := strings.Cut(o.brokerSecret, "/"); !ok || ns == "" || name == "" {
				bad("broker-secret", "%q is not NAMESPACE/NAME", o.brokerSecret)
			}
		}
		if o.brokerKubeconfig != "" {
			if _, err := os.Stat(o.brokerKubeconfig); err != nil {
				bad("broker-kubeconfig", "%v", err)
			}
		}
	}
	if o.kubeconfig != "" {
		if _, err := os.Stat(o.kubeconfig); err != nil {
			bad("kubeconfig", "%v", err)
		}
	}
	if errs := validation.IsDNS1123Label(o.brokerNamespace); len(errs) > 0 {
		bad("broker-namespace", "%q is not a namespace name: %s", o.brokerNamespace, strings.Join(errs, "; "))
	}
	if o.clientQPS <= 0 {
		bad("kube-api-qps", "must be positive, got %v", o.clientQPS)
	}
	if o.clientBurst < 1 {
		bad("kube-api-burst", "must be at least 1, got %d", o.clientBurst)
	}
	if o.clusterID != "" {
		if err := clusterid.Validate(o.clusterID); err != nil {
			bad("cluster-id", "%v", err)
		}
	}
	if errs := validation.IsDNS1123Subdomain(o.clusterSet); len(errs) > 0 {
		bad("clusterset", "%q is not a DNS subdomain: %s", o.clusterSet, strings.Join(errs, "; "))
	}

	var err error
	if o.clusterSetCIDRs, err = parseFamilyPrefixes(raw.clusterSetCIDRs); err != nil {
		bad("clusterset-cidrs", "%v", err)
	}
	if o.clusterVIPCIDRs, err = parseFamilyPrefixes(raw.clusterVIPCIDRs); err != nil {
		bad("cluster-vip-cidrs", "%v", err)
	}
	for _, block := range o.clusterVIPCIDRs {
		set, ok := prefixOfFamily(o.clusterSetCIDRs, block.Addr().Is4())
		if !ok || !set.Contains(block.Addr()) || block.Bits() < set.Bits() {
			bad("cluster-vip-cidrs", "%s is not inside any range of --clusterset-cidrs (%s)", block, raw.clusterSetCIDRs)
		}
	}
	if v4, ok := prefixOfFamily(o.clusterSetCIDRs, true); ok && (o.vipBlockBitsV4 < v4.Bits() || o.vipBlockBitsV4 > 30) {
		bad("vip-block-bits-ipv4", "%d does not fit inside %s (use %d-30)", o.vipBlockBitsV4, v4, v4.Bits())
	}
	if v6, ok := prefixOfFamily(o.clusterSetCIDRs, false); ok && (o.vipBlockBitsV6 < v6.Bits() || o.vipBlockBitsV6 > 126) {
		bad("vip-block-bits-ipv6", "%d does not fit inside %s (use %d-126)", o.vipBlockBitsV6, v6, v6.Bits())
	}
	if o.leaseDuration < time.Second {
		bad("lease-duration", "must be at least 1s, got %v", o.leaseDuration)
	}
	if o.clusterTTL < o.leaseDuration/2 {
		bad("cluster-ttl", "%v is shorter than half of --lease-duration (%v): live clusters would be dropped between renewals", o.clusterTTL, o.leaseDuration)
	}
	if o.leaderElect {
		if errs := validation.IsDNS1123Label(o.leaderElectNS); len(errs) > 0 {
			bad("leader-elect-namespace", "%q is not a namespace name", o.leaderElectNS)
		}
		if o.leaderElectRenew >= o.leaderElectLease {
			bad("leader-elect-renew-deadline", "%v must be shorter than --leader-elect-lease-duration (%v)", o.leaderElectRenew, o.leaderElectLease)
		}
		if o.leaderElectRetry <= 0 || o.leaderElectRetry >= o.leaderElectRenew {
			bad("leader-elect-retry-period", "%v must be positive and shorter than --leader-elect-renew-deadline (%v)", o.leaderElectRetry, o.leaderElectRenew)
		}
	}
	if o.exporterWorkers < 1 {
		bad("exporter-workers", "must be at least 1, got %d", o.exporterWorkers)
	}
	if o.importerWorkers < 1 {
		bad("importer-workers", "must be at least 1, got %d", o.importerWorkers)
	}
	o.importDeniedNamespaces = []string{}
	for _, ns := range splitList(raw.importDeniedNamespaces) {
		if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
			bad("import-namespace-denylist", "%q is not a namespace name: %s", ns, strings.Join(errs, "; "))
			continue
		}
		if !slices.Contains(o.importDeniedNamespaces, ns) {
			o.importDeniedNamespaces = append(o.importDeniedNamespaces, ns)
		}
	}
	if o.maxServicesPerCluster < 1 {
		bad("max-services-per-cluster", "must be at least 1, got %d", o.maxServicesPerCluster)
	}
	if o.goneClusterGrace < o.clusterTTL {
		bad("gone-cluster-grace", "%v is shorter than --cluster-ttl (%v): a cluster's records would stop counting before it is even gone", o.goneClusterGrace, o.clusterTTL)
	}
	if o.controllerResync < time.Second {
		bad("controller-resync-period", "must be at least 1s, got %v", o.controllerResync)
	}

	if o.runs(componentDNS) {
		if _, _, err := net.SplitHostPort(o.dnsListen); err != nil {
			bad("dns-listen", "%q is not HOST:PORT: %v", o.dnsListen, err)
		}
		if o.dnsTTL < time.Second || o.dnsTTL > 24*time.Hour {
			bad("dns-ttl", "%v is out of range; use 1s to 24h", o.dnsTTL)
		}
		o.dnsReverseCIDRs = nil
		for _, part := range splitList(raw.dnsReverseCIDRs) {
			p, err := netip.ParsePrefix(part)
			switch {
			case err != nil:
				bad("dns-reverse-cidrs", "%q is not a CIDR: %v", part, err)
			case p.Bits() < 8 && p.Addr().Is4(), p.Bits() < 4:
				bad("dns-reverse-cidrs", "%s is wider than a reverse zone's first label (/8 for IPv4, /4 for IPv6)", p)
			default:
				o.dnsReverseCIDRs = append(o.dnsReverseCIDRs, p.Masked())
			}
		}
	}
	if o.netns != "" {
		if _, err := os.Stat(o.netns); err != nil {
			bad("netns", "%v", err)
		}
	}
	o.ipFamilies = nil
	for _, f := range splitList(raw.ipFamilies) {
		family := corev1.IPFamily(f)
		switch {
		case family != corev1.IPv4Protocol && family != corev1.IPv6Protocol:
			bad("ip-families", "unknown IP family %q; use IPv4, IPv6 or both", f)
		case slices.Contains(o.ipFamilies, family):
			bad("ip-families", "%s given twice", f)
		default:
			o.ipFamilies = append(o.ipFamilies, family)
		}
	}
	if len(o.ipFamilies) == 0 {
		bad("ip-families", "no IP family given")
	}
	if o.proxierMode, err = proxier.ParseMode(raw.proxierMode); err != nil {
		bad("proxier-mode", "%v", err)
	}
	if o.minSync <= 0 {
		bad("proxier-min-sync-period", "must be positive, got %v", o.minSync)
	}
	if o.syncPeriod < o.minSync {
		bad("proxier-sync-period", "%v is shorter than --proxier-min-sync-period (%v)", o.syncPeriod, o.minSync)
	}
	if o.fullSync < o.syncPeriod {
		bad("proxier-full-sync-period", "%v is shorter than --proxier-sync-period (%v)", o.fullSync, o.syncPeriod)
	}
	if mark, err := strconv.ParseUint(raw.masqMark, 0, 32); err != nil {
		bad("masquerade-mark", "%q is not a 32-bit number: %v", raw.masqMark, err)
	} else if mark == 0 || mark&(mark-1) != 0 {
		bad("masquerade-mark", "%#x must be a single bit, such as %#x", mark, proxier.DefaultMasqueradeMark)
	} else {
		o.masqMark = uint32(mark)
	}
	o.podCIDRs = nil
	for _, c := range splitList(raw.podCIDRs) {
		p, err := netip.ParsePrefix(c)
		if err != nil {
			bad("pod-cidrs", "%q is not a CIDR: %v", c, err)
			continue
		}
		o.podCIDRs = append(o.podCIDRs, p.Masked().String())
	}
	if o.healthTimeout <= 0 {
		bad("proxier-healthz-timeout", "must be positive, got %v", o.healthTimeout)
	}
	for name, addr := range map[string]string{"metrics-address": o.metricsAddress, "health-address": o.healthAddress} {
		if addr == "" {
			continue
		}
		if _, _, err := net.SplitHostPort(addr); err != nil {
			bad(name, "%q is not HOST:PORT: %v", addr, err)
		}
	}
	if o.shutdownGracePeriod < 0 {
		bad("shutdown-grace-period", "must not be negative")
	}
	return errors.Join(errs...)
}

func (o *options) runs(component string) bool { return slices.Contains(o.components, component) }

func (o *options) runsControllers() bool {
	return o.runs(componentExporter) || o.runs(componentImporter)
}

// blockBits is the size of the VIP block this cluster claims in family.
func (o *options) blockBits(v4 bool) int {
	if v4 {
		return o.vipBlockBitsV4
	}
	return o.vipBlockBitsV6
}

func splitList(s string) []string {
	var out []string
	for _, part := range strings.Split(s, ",") {
		if part = strings.TrimSpace(part); part != "" {
			out = append(out, part)
		}
	}
	return out
}

// parseFamilyPrefixes parses a comma-separated list of at most one CIDR per
// IP family.
func parseFamilyPrefixes(s string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, part := range splitList(s) {
		p, err := netip.ParsePrefix(part)
		if err != nil {
			return nil, fmt.Errorf("%q is not a CIDR: %v", part, err)
		}
		p = p.Masked()
		if _, dup := prefixOfFamily(out, p.Addr().Is4()); dup {
			return nil, fmt.Errorf("more than one range of the family of %s", p)
		}
		out = append(out, p)
	}
	return out, nil
}

func prefixOfFamily(prefixes []netip.Prefix, v4 bool) (netip.Prefix, bool) {
	for _, p := range prefixes {
		if p.Addr().Is4() == v4 {
			return p, true
		}
	}
	return netip.Prefix{}, false
}
