package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	cliflag "k8s.io/component-base/cli/flag"
	logsapi "k8s.io/component-base/logs/api/v1"

	// --logging-format=json
	_ "k8s.io/component-base/logs/json/register"

	"github.com/mcsd-io/mcsd/broker"
	"github.com/mcsd-io/mcsd/clusterid"
	"github.com/mcsd-io/mcsd/dns"
	"github.com/mcsd-io/mcsd/dnsgate"
	"github.com/mcsd-io/mcsd/importer"
	"github.com/mcsd-io/mcsd/internal/ipfamilies"
	"github.com/mcsd-io/mcsd/liveness"
	"github.com/mcsd-io/mcsd/proxier"
	"github.com/mcsd-io/mcsd/vipalloc"
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

	clusterSetIPs bool
	// clusterSetCIDRs and vipBlockBits* are the flags' ranges, or the
	// defaults where a flag is not given; the controllers run with the
	// broker's settings (rangesWithBroker), which the given flags
	// (givenRanges) must repeat.
	clusterSetCIDRs     []netip.Prefix
	givenRanges         givenRanges
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
	shutdownDelay       time.Duration

	// The importer's defences against other members.
	importDeniedNamespaces []string
	maxServicesPerCluster  int
	goneClusterGrace       time.Duration

	dnsListen string
	dnsZone   string
	dnsTTL    time.Duration
	// dnsGate says when DNS hands out a ClusterSetIP: once this node's
	// proxier carries it (gateNode), or every node's (gateCluster).
	dnsGate string
	// dnsGatePeers selects the node agents' pods, whose readiness says
	// which nodes' reports count.
	dnsGatePeers  string
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
	// metricsSecure serves /metrics over HTTPS to reviewed tokens only;
	// metricsCertFile and metricsKeyFile are its certificate, or empty for
	// a self-signed one.
	metricsSecure   bool
	metricsCertFile string
	metricsKeyFile  string
	healthAddress   string

	logs *logsapi.LoggingConfiguration

	// help and version ask for a message instead of a run; cleanup for
	// the removal of the proxier's rules.
	help, version, cleanup bool
}

// givenRanges say which of the clusterset settings were given as flags.
type givenRanges struct{ cidrs, blockBitsV4, blockBitsV6 bool }

// The default ports, chosen clear of what commonly listens on a node's
// addresses (the kubelet's 10248/10250/10255, kube-proxy's 10249/10256, the
// control plane's 10257-10259, node-exporter's 9100, Prometheus' 9090,
// Cockpit's 9090, Calico's 9091/9099/5473, Cilium's 4240/4244/9879/9890/
// 9962-9965, NodeLocal DNSCache's 9253, Istio's 15000-15090, mDNS's 5353,
// LLMNR's 5355): mcsd's node agent runs in the host's network namespace.
const (
	defaultDNSListen      = ":10271"
	defaultHealthAddress  = ":10272"
	defaultMetricsAddress = "127.0.0.1:10273"
)

// The values of --dns-gate.
const (
	gateCluster = "cluster"
	gateNode    = "node"
)

// rawFlags holds flag values that need parsing after flag.Parse.
type rawFlags struct {
	components, clusterSetCIDRs, clusterVIPCIDRs, ipFamilies, podCIDRs, masqMark, proxierMode string

	importDeniedNamespaces string

	dnsReverseCIDRs string
}

// The groups of flags in --help, in order.
const (
	flagsGeneral       = "general"
	flagsConnection    = "connection"
	flagsIdentity      = "cluster identity"
	flagsClusterSetIP  = "ClusterSetIP"
	flagsControllers   = "controllers"
	flagsDNS           = "DNS"
	flagsProxier       = "proxier"
	flagsObservability = "observability"
	flagsLogging       = "logging"
)

// flagSets registers every flag of the daemon in its group of --help and
// returns them also as one set to parse. Flags are Kubernetes style:
// --name=value or --name value, booleans --name or --name=false.
func (o *options) flagSets() (*pflag.FlagSet, cliflag.NamedFlagSets, *rawFlags) {
	var nfs cliflag.NamedFlagSets
	raw := o.register(&nfs)
	fs := pflag.NewFlagSet("mcsd", pflag.ContinueOnError)
	// --cluster_id is --cluster-id, as in Kubernetes components.
	fs.SetNormalizeFunc(cliflag.WordSepNormalizeFunc)
	// Errors are reported by the caller, once, without the whole usage.
	fs.SetOutput(io.Discard)
	for _, name := range nfs.Order {
		fs.AddFlagSet(nfs.FlagSets[name])
	}
	return fs, nfs, raw
}

func (o *options) register(nfs *cliflag.NamedFlagSets) *rawFlags {
	raw := &rawFlags{}
	general := nfs.FlagSet(flagsGeneral)
	connection := nfs.FlagSet(flagsConnection)
	identity := nfs.FlagSet(flagsIdentity)
	vip := nfs.FlagSet(flagsClusterSetIP)
	controllers := nfs.FlagSet(flagsControllers)
	dnsFlags := nfs.FlagSet(flagsDNS)
	proxierFlags := nfs.FlagSet(flagsProxier)
	observability := nfs.FlagSet(flagsObservability)
	logging := nfs.FlagSet(flagsLogging)

	general.BoolVarP(&o.help, "help", "h", false, "print the flags and exit")
	general.BoolVar(&o.version, "version", false, "print the version, commit and Go version, and exit")
	general.BoolVar(&o.cleanup, "cleanup", false, "remove mcsd's nftables tables and iptables chains (both families, both modes) from the node, in --netns, and exit")
	general.StringVar(&raw.components, "components", strings.Join(allComponents, ","), "comma-separated components to run: "+strings.Join(allComponents, ", "))
	general.DurationVar(&o.shutdownGracePeriod, "shutdown-grace-period", 5*time.Second, "time components get to stop after SIGTERM")
	general.DurationVar(&o.shutdownDelay, "shutdown-delay-duration", 0, "time between SIGTERM and stopping the components, during which /readyz fails and everything else goes on serving: long enough for the kubelet's readiness probe to fail and every kube-proxy to move the flows pinned to this pod (a second SIGTERM stops at once)")

	connection.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig of the local cluster; empty means in-cluster configuration")
	connection.StringVar(&o.brokerKubeconfig, "broker-kubeconfig", "", "kubeconfig of the broker (this cluster's broker identity)")
	connection.StringVar(&o.brokerSecret, "broker-secret", "", "NAMESPACE/NAME of a Secret in the local cluster whose key \"kubeconfig\" is the broker kubeconfig (instead of --broker-kubeconfig)")
	connection.StringVar(&o.brokerNamespace, "broker-namespace", broker.DefaultNamespace, "the broker namespace (settings, claims, declarations); this cluster writes its records in <broker-namespace>-<cluster-id> and reads every cluster's across their namespaces")
	connection.Float64Var(&o.clientQPS, "kube-api-qps", 500, "queries per second of each of mcsd's clients")
	connection.IntVar(&o.clientBurst, "kube-api-burst", 1000, "burst of queries of each of mcsd's clients")

	identity.StringVar(&o.clusterID, "cluster-id", "", "this cluster's ID (an RFC 1123 label); empty means the cluster.clusterset.k8s.io ClusterProperty, created from the kube-system namespace UID when absent")
	identity.StringVar(&o.clusterSet, "clusterset", "clusterset", "name of the ClusterSet this cluster joins (recorded as the clusterset.k8s.io ClusterProperty)")

	vip.BoolVar(&o.clusterSetIPs, "clusterset-ip", true, "give exported ClusterSetIP services a clusterset VIP (a ServiceExport's annotation "+"mcsd.io/clusterset-ip overrides it)")
	vip.StringVar(&raw.clusterSetCIDRs, "clusterset-cidrs", "", "clusterset VIP ranges, at most one per IP family; empty means the broker's ("+broker.SettingsName+"), and for DNS and the proxier without the controllers, "+vipalloc.DefaultClusterSetCIDRv4.String()+","+vipalloc.DefaultClusterSetCIDRv6.String()+"; the controllers refuse ranges that differ from the broker's")
	vip.StringVar(&raw.clusterVIPCIDRs, "cluster-vip-cidrs", "", "this cluster's VIP blocks inside the clusterset ranges, at most one per family; empty means the first free block of the broker's block size")
	vip.IntVar(&o.vipBlockBitsV4, "vip-block-bits-ipv4", 0, fmt.Sprintf("prefix length of the IPv4 VIP block a cluster claims when --cluster-vip-cidrs has none; 0 means the broker's (default %d); another value than the broker's is refused", vipalloc.DefaultBlockBitsV4))
	vip.IntVar(&o.vipBlockBitsV6, "vip-block-bits-ipv6", 0, fmt.Sprintf("prefix length of the IPv6 VIP block a cluster claims when --cluster-vip-cidrs has none; 0 means the broker's (default %d); another value than the broker's is refused", vipalloc.DefaultBlockBitsV6))

	controllers.DurationVar(&o.leaseDuration, "lease-duration", 10*time.Second, "duration of this cluster's heartbeat Lease on the broker; it is renewed every fifth of it")
	controllers.DurationVar(&o.clusterTTL, "cluster-ttl", 10*time.Second, "a cluster whose broker Lease has not been renewed for this long is gone: its endpoints leave every importing cluster")
	controllers.BoolVar(&o.leaderElect, "leader-elect", true, "run the exporter and importer only in the elected replica (a Lease in the local cluster)")
	controllers.StringVar(&o.leaderElectNS, "leader-elect-namespace", "mcsd-system", "namespace of the leader-election Lease")
	controllers.StringVar(&o.leaderElectID, "leader-elect-identity", "", "this replica's identity in leader election; empty means the node name and process ID")
	controllers.DurationVar(&o.leaderElectLease, "leader-elect-lease-duration", 15*time.Second, "leader-election lease duration")
	controllers.DurationVar(&o.leaderElectRenew, "leader-elect-renew-deadline", 10*time.Second, "leader-election renew deadline")
	controllers.DurationVar(&o.leaderElectRetry, "leader-elect-retry-period", 2*time.Second, "leader-election retry period")
	controllers.IntVar(&o.exporterWorkers, "exporter-workers", 4, "services the exporter syncs at once")
	controllers.IntVar(&o.importerWorkers, "importer-workers", 4, "services the importer syncs at once")
	controllers.StringVar(&raw.importDeniedNamespaces, "import-namespace-denylist", "kube-system,kube-public", "comma-separated namespaces whose services this cluster never imports, whoever exports them; empty denies none (mcsd's own namespace, --leader-elect-namespace, and default/kubernetes are never imported)")
	controllers.IntVar(&o.maxServicesPerCluster, "max-services-per-cluster", importer.DefaultMaxServicesPerCluster, "most export records one cluster may contribute; the importer ignores its newest beyond that")
	controllers.DurationVar(&o.goneClusterGrace, "gone-cluster-grace", liveness.DefaultGrace, "how long the records of a cluster whose Lease is dead (or absent) still decide the services' type, ports and ClusterSetIPs")
	controllers.DurationVar(&o.controllerResync, "controller-resync-period", 10*time.Minute, "how often the exporter and importer re-check every service")

	dnsFlags.StringVar(&o.dnsListen, "dns-listen", defaultDNSListen, "address the clusterset DNS server listens on, UDP and TCP")
	dnsFlags.StringVar(&o.dnsZone, "dns-zone", dns.DefaultZone, "the clusterset DNS zone")
	dnsFlags.DurationVar(&o.dnsTTL, "dns-ttl", dns.DefaultTTL, "TTL of DNS answers")
	dnsFlags.StringVar(&o.dnsGate, "dns-gate", gateCluster, "when DNS hands out a ClusterSetIP: "+gateCluster+" (once the proxier of every node of the cluster carries it; each node reports in a Lease "+dnsgate.LeaseName("<node>")+" in --leader-elect-namespace, written when it changes; a node counts while its node agent's pod, --dns-gate-peers, is Ready there) or "+gateNode+" (once this node's proxier carries it)")
	dnsFlags.StringVar(&o.dnsGatePeers, "dns-gate-peers", dnsgate.DefaultPeerPods, "label selector of the node agents' pods in --leader-elect-namespace, for --dns-gate="+gateCluster)
	dnsFlags.StringVar(&raw.dnsReverseCIDRs, "dns-reverse-cidrs", "", "comma-separated ranges whose reverse zones (in-addr.arpa, ip6.arpa) the DNS server is authoritative for besides --clusterset-cidrs', such as every cluster's pod CIDRs for the PTR records of headless endpoints; forward their zones to it too")

	proxierFlags.StringVar(&o.netns, "netns", "", "path of the network namespace (such as /run/netns/NAME) where the proxier programs nftables and the DNS server listens; empty means the daemon's own")
	proxierFlags.StringVar(&o.nodeName, "node-name", os.Getenv("NODE_NAME"), "this node's name (default $NODE_NAME); internalTrafficPolicy Local prefers its endpoints")
	proxierFlags.StringVar(&raw.ipFamilies, "ip-families", "", "IP families this cluster serves (IPv4, IPv6 or IPv4,IPv6): the proxier programs them, and services are imported in them only (none of them: IPFamilyNotSupported); empty means those of the cluster's ServiceCIDR \""+ipfamilies.DefaultServiceCIDR+"\", less IPv6 on a host without it")
	proxierFlags.StringVar(&raw.proxierMode, "proxier-mode", string(proxier.ModeNFTables), "how the proxier programs the node: nftables, iptables (for kernels or nft too old for nftables), or auto (nftables when the kernel and nft support it, else iptables)")
	proxierFlags.DurationVar(&o.minSync, "proxier-min-sync-period", proxier.DefaultMinSyncPeriod, "least time between two proxier syncs")
	proxierFlags.DurationVar(&o.syncPeriod, "proxier-sync-period", proxier.DefaultSyncPeriod, "most time between two proxier syncs")
	proxierFlags.DurationVar(&o.fullSync, "proxier-full-sync-period", proxier.DefaultFullSyncPeriod, "how often the proxier counts the rules of each of its chains and rewrites those changed behind its back")
	proxierFlags.StringVar(&raw.masqMark, "masquerade-mark", fmt.Sprintf("%#x", proxier.DefaultMasqueradeMark), "the single packet-mark bit that flags traffic to masquerade")
	proxierFlags.BoolVar(&o.masqAll, "masquerade-all", false, "masquerade all traffic to ClusterSetIPs")
	proxierFlags.StringVar(&raw.podCIDRs, "pod-cidrs", "", "this cluster's pod CIDRs; traffic to a ClusterSetIP from other sources is masqueraded")
	proxierFlags.BoolVar(&o.preferLocal, "prefer-local-cluster", false, "prefer the local cluster's endpoints for every ClusterSetIP, as trafficDistribution PreferClose does")
	proxierFlags.DurationVar(&o.healthTimeout, "proxier-healthz-timeout", time.Minute, "the proxier is unhealthy when a queued update has not been applied for this long")

	observability.StringVar(&o.metricsAddress, "metrics-address", defaultMetricsAddress, "address of the Prometheus /metrics endpoint; empty disables it")
	observability.BoolVar(&o.metricsSecure, "metrics-secure", true, "serve --metrics-address over HTTPS, each request authenticated by its bearer token (a TokenReview) and authorized (a SubjectAccessReview of get on the non-resource URL, such as /metrics) by the local cluster's API server, as kube-scheduler's; false serves plain HTTP to anyone, and only on a loopback address")
	observability.StringVar(&o.metricsCertFile, "metrics-tls-cert-file", "", "PEM certificate (with its chain) of the secure --metrics-address, read again when it changes; empty means a self-signed one made at start")
	observability.StringVar(&o.metricsKeyFile, "metrics-tls-private-key-file", "", "PEM private key of --metrics-tls-cert-file")
	observability.BoolVar(&o.profiling, "profiling", false, "serve Go's profiles under /debug/pprof/ on --metrics-address")
	observability.StringVar(&o.healthAddress, "health-address", defaultHealthAddress, "address of /healthz, /readyz and /livez, which the kubelet's probes and kubectl mcs diagnose read; empty disables them")

	// As Kubernetes components: -v, --vmodule, --logging-format (text or
	// json) and --log-flush-frequency, applied by logsapi.ValidateAndApply.
	o.logs = logsapi.NewLoggingConfiguration()
	logsapi.AddFlags(o.logs, logging)
	return raw
}

// complete parses the raw flags and checks every value, naming the flag at
// fault.
func (o *options) complete(raw *rawFlags) error {
	var errs flagErrors
	o.completeComponents(raw, &errs)
	o.completeConnection(&errs)
	o.completeClusterSetIPs(raw, &errs)
	o.completeControllers(raw, &errs)
	o.completeDNS(raw, &errs)
	o.completeProxier(raw, &errs)
	o.completeObservability(&errs)
	return errors.Join(errs...)
}

// flagErrors are the errors of complete, each naming its flag.
type flagErrors []error

func (e *flagErrors) bad(flagName, format string, args ...any) {
	*e = append(*e, fmt.Errorf("--%s: %s", flagName, fmt.Sprintf(format, args...)))
}

func (o *options) completeComponents(raw *rawFlags, errs *flagErrors) {
	o.components = nil
	for _, c := range splitList(raw.components) {
		if !slices.Contains(allComponents, c) {
			errs.bad("components", "unknown component %q; choose from %s", c, strings.Join(allComponents, ", "))
			continue
		}
		if !slices.Contains(o.components, c) {
			o.components = append(o.components, c)
		}
	}
	if len(o.components) == 0 {
		errs.bad("components", "no component to run")
	}
}

// completeConnection checks how the local cluster and the broker are
// reached, and who this cluster is.
func (o *options) completeConnection(errs *flagErrors) {
	if o.runsControllers() {
		if o.brokerKubeconfig == "" && o.brokerSecret == "" {
			errs.bad("broker-kubeconfig", "the exporter and importer need the broker: give --broker-kubeconfig or --broker-secret")
		}
		if o.brokerKubeconfig != "" && o.brokerSecret != "" {
			errs.bad("broker-secret", "give either --broker-kubeconfig or --broker-secret, not both")
		}
		if o.brokerSecret != "" {
			if ns, name, ok := strings.Cut(o.brokerSecret, "/"); !ok || ns == "" || name == "" {
				errs.bad("broker-secret", "%q is not NAMESPACE/NAME", o.brokerSecret)
			}
		}
		checkFile(errs, "broker-kubeconfig", o.brokerKubeconfig)
	}
	checkFile(errs, "kubeconfig", o.kubeconfig)
	if e := validation.IsDNS1123Label(o.brokerNamespace); len(e) > 0 {
		errs.bad("broker-namespace", "%q is not a namespace name: %s", o.brokerNamespace, strings.Join(e, "; "))
	}
	if o.clientQPS <= 0 {
		errs.bad("kube-api-qps", "must be positive, got %v", o.clientQPS)
	}
	if o.clientBurst < 1 {
		errs.bad("kube-api-burst", "must be at least 1, got %d", o.clientBurst)
	}
	if o.clusterID != "" {
		if err := clusterid.Validate(o.clusterID); err != nil {
			errs.bad("cluster-id", "%v", err)
		}
	}
	if e := validation.IsDNS1123Subdomain(o.clusterSet); len(e) > 0 {
		errs.bad("clusterset", "%q is not a DNS subdomain: %s", o.clusterSet, strings.Join(e, "; "))
	}
}

// checkFile says when a path given to flagName does not exist.
func checkFile(errs *flagErrors, flagName, path string) {
	if path == "" {
		return
	}
	if _, err := os.Stat(path); err != nil {
		errs.bad(flagName, "%v", err)
	}
}

// completeClusterSetIPs checks the clusterset ranges given as flags; those
// not given take the defaults here and the broker's in the controllers.
func (o *options) completeClusterSetIPs(raw *rawFlags, errs *flagErrors) {
	o.givenRanges = givenRanges{cidrs: strings.TrimSpace(raw.clusterSetCIDRs) != "", blockBitsV4: o.vipBlockBitsV4 != 0, blockBitsV6: o.vipBlockBitsV6 != 0}
	o.clusterSetCIDRs = []netip.Prefix{vipalloc.DefaultClusterSetCIDRv4, vipalloc.DefaultClusterSetCIDRv6}
	if !o.givenRanges.blockBitsV4 {
		o.vipBlockBitsV4 = vipalloc.DefaultBlockBitsV4
	}
	if !o.givenRanges.blockBitsV6 {
		o.vipBlockBitsV6 = vipalloc.DefaultBlockBitsV6
	}
	var err error
	if o.givenRanges.cidrs {
		if o.clusterSetCIDRs, err = parseFamilyPrefixes(raw.clusterSetCIDRs); err != nil {
			errs.bad("clusterset-cidrs", "%v", err)
		}
	}
	if o.clusterVIPCIDRs, err = parseFamilyPrefixes(raw.clusterVIPCIDRs); err != nil {
		errs.bad("cluster-vip-cidrs", "%v", err)
	}
	if o.givenRanges.cidrs {
		// Else the broker's ranges decide, once read.
		if err := vipBlocksInside(o.clusterVIPCIDRs, o.clusterSetCIDRs); err != nil {
			errs.bad("cluster-vip-cidrs", "%v", err)
		}
	}
	if v4, ok := prefixOfFamily(o.clusterSetCIDRs, true); ok && (o.vipBlockBitsV4 < v4.Bits() || o.vipBlockBitsV4 > 30) {
		errs.bad("vip-block-bits-ipv4", "%d does not fit inside %s (use %d-30)", o.vipBlockBitsV4, v4, v4.Bits())
	}
	if v6, ok := prefixOfFamily(o.clusterSetCIDRs, false); ok && (o.vipBlockBitsV6 < v6.Bits() || o.vipBlockBitsV6 > 126) {
		errs.bad("vip-block-bits-ipv6", "%d does not fit inside %s (use %d-126)", o.vipBlockBitsV6, v6, v6.Bits())
	}
}

// completeControllers checks the flags of the controller role: the
// heartbeat and liveness, leader election, the workers and the importer's
// defences.
func (o *options) completeControllers(raw *rawFlags, errs *flagErrors) {
	if o.leaseDuration < time.Second {
		errs.bad("lease-duration", "must be at least 1s, got %v", o.leaseDuration)
	}
	if o.clusterTTL < o.leaseDuration/2 {
		errs.bad("cluster-ttl", "%v is shorter than half of --lease-duration (%v): live clusters would be dropped between renewals", o.clusterTTL, o.leaseDuration)
	}
	if o.leaderElect {
		if e := validation.IsDNS1123Label(o.leaderElectNS); len(e) > 0 {
			errs.bad("leader-elect-namespace", "%q is not a namespace name", o.leaderElectNS)
		}
		if o.leaderElectRenew >= o.leaderElectLease {
			errs.bad("leader-elect-renew-deadline", "%v must be shorter than --leader-elect-lease-duration (%v)", o.leaderElectRenew, o.leaderElectLease)
		}
		if o.leaderElectRetry <= 0 || o.leaderElectRetry >= o.leaderElectRenew {
			errs.bad("leader-elect-retry-period", "%v must be positive and shorter than --leader-elect-renew-deadline (%v)", o.leaderElectRetry, o.leaderElectRenew)
		}
	}
	for _, f := range []struct {
		name string
		n    int
	}{{"exporter-workers", o.exporterWorkers}, {"importer-workers", o.importerWorkers}, {"max-services-per-cluster", o.maxServicesPerCluster}} {
		if f.n < 1 {
			errs.bad(f.name, "must be at least 1, got %d", f.n)
		}
	}
	o.importDeniedNamespaces = []string{}
	for _, ns := range splitList(raw.importDeniedNamespaces) {
		if e := validation.IsDNS1123Label(ns); len(e) > 0 {
			errs.bad("import-namespace-denylist", "%q is not a namespace name: %s", ns, strings.Join(e, "; "))
			continue
		}
		if !slices.Contains(o.importDeniedNamespaces, ns) {
			o.importDeniedNamespaces = append(o.importDeniedNamespaces, ns)
		}
	}
	if o.goneClusterGrace < o.clusterTTL {
		errs.bad("gone-cluster-grace", "%v is shorter than --cluster-ttl (%v): a cluster's records would stop counting before it is even gone", o.goneClusterGrace, o.clusterTTL)
	}
	if o.controllerResync < time.Second {
		errs.bad("controller-resync-period", "must be at least 1s, got %v", o.controllerResync)
	}
}

func (o *options) completeDNS(raw *rawFlags, errs *flagErrors) {
	if !o.runs(componentDNS) {
		return
	}
	if _, _, err := net.SplitHostPort(o.dnsListen); err != nil {
		errs.bad("dns-listen", "%q is not HOST:PORT: %v", o.dnsListen, err)
	}
	if o.dnsTTL < time.Second || o.dnsTTL > 24*time.Hour {
		errs.bad("dns-ttl", "%v is out of range; use 1s to 24h", o.dnsTTL)
	}
	o.dnsReverseCIDRs = nil
	for _, part := range splitList(raw.dnsReverseCIDRs) {
		p, err := netip.ParsePrefix(part)
		switch {
		case err != nil:
			errs.bad("dns-reverse-cidrs", "%q is not a CIDR: %v", part, err)
		case p.Bits() < 8 && p.Addr().Is4(), p.Bits() < 4:
			errs.bad("dns-reverse-cidrs", "%s is wider than a reverse zone's first label (/8 for IPv4, /4 for IPv6)", p)
		default:
			o.dnsReverseCIDRs = append(o.dnsReverseCIDRs, p.Masked())
		}
	}
}

// completeProxier checks the flags of the node's data plane: its
// namespace, IP families and the proxier's settings.
func (o *options) completeProxier(raw *rawFlags, errs *flagErrors) {
	checkFile(errs, "netns", o.netns)
	o.ipFamilies = nil
	for _, f := range splitList(raw.ipFamilies) {
		family := corev1.IPFamily(f)
		switch {
		case family != corev1.IPv4Protocol && family != corev1.IPv6Protocol:
			errs.bad("ip-families", "unknown IP family %q; use IPv4, IPv6 or both", f)
		case slices.Contains(o.ipFamilies, family):
			errs.bad("ip-families", "%s given twice", f)
		default:
			o.ipFamilies = append(o.ipFamilies, family)
		}
	}
	// None given: run learns them from the cluster.
	var err error
	if o.proxierMode, err = proxier.ParseMode(raw.proxierMode); err != nil {
		errs.bad("proxier-mode", "%v", err)
	}
	switch o.dnsGate {
	case gateNode:
	case gateCluster:
		if o.runs(componentProxier) && o.nodeName == "" {
			errs.bad("dns-gate", "%s needs this node's name: set --node-name or $NODE_NAME, or choose %s", gateCluster, gateNode)
		}
		if _, err := labels.Parse(o.dnsGatePeers); err != nil || o.dnsGatePeers == "" {
			errs.bad("dns-gate-peers", "%q is not a label selector: %v", o.dnsGatePeers, err)
		}
	default:
		errs.bad("dns-gate", "unknown gate %q; choose %s or %s", o.dnsGate, gateCluster, gateNode)
	}
	if o.minSync <= 0 {
		errs.bad("proxier-min-sync-period", "must be positive, got %v", o.minSync)
	}
	if o.syncPeriod < o.minSync {
		errs.bad("proxier-sync-period", "%v is shorter than --proxier-min-sync-period (%v)", o.syncPeriod, o.minSync)
	}
	if o.fullSync < o.syncPeriod {
		errs.bad("proxier-full-sync-period", "%v is shorter than --proxier-sync-period (%v)", o.fullSync, o.syncPeriod)
	}
	if mark, err := strconv.ParseUint(raw.masqMark, 0, 32); err != nil {
		errs.bad("masquerade-mark", "%q is not a 32-bit number: %v", raw.masqMark, err)
	} else if mark == 0 || mark&(mark-1) != 0 {
		errs.bad("masquerade-mark", "%#x must be a single bit, such as %#x", mark, proxier.DefaultMasqueradeMark)
	} else {
		o.masqMark = uint32(mark)
	}
	o.podCIDRs = nil
	for _, c := range splitList(raw.podCIDRs) {
		p, err := netip.ParsePrefix(c)
		if err != nil {
			errs.bad("pod-cidrs", "%q is not a CIDR: %v", c, err)
			continue
		}
		o.podCIDRs = append(o.podCIDRs, p.Masked().String())
	}
	if o.healthTimeout <= 0 {
		errs.bad("proxier-healthz-timeout", "must be positive, got %v", o.healthTimeout)
	}
}

// completeObservability checks the endpoints, the shutdown and the logs.
func (o *options) completeObservability(errs *flagErrors) {
	for name, addr := range map[string]string{"metrics-address": o.metricsAddress, "health-address": o.healthAddress} {
		if addr == "" {
			continue
		}
		if _, _, err := net.SplitHostPort(addr); err != nil {
			errs.bad(name, "%q is not HOST:PORT: %v", addr, err)
		}
	}
	o.completeMetrics(errs)
	if o.shutdownGracePeriod < 0 {
		errs.bad("shutdown-grace-period", "must not be negative")
	}
	if o.shutdownDelay < 0 {
		errs.bad("shutdown-delay-duration", "must not be negative")
	}
	for _, err := range logsapi.Validate(o.logs, nil, nil) {
		errs.bad(loggingFlag(err.Field), "%s", err.ErrorBody())
	}
}

// completeMetrics checks how /metrics is served: plain HTTP only where the
// node's own processes alone reach it, a certificate with its key.
func (o *options) completeMetrics(errs *flagErrors) {
	if !o.metricsSecure {
		if o.metricsCertFile != "" || o.metricsKeyFile != "" {
			errs.bad("metrics-secure", "false serves plain HTTP, which takes no --metrics-tls-cert-file or --metrics-tls-private-key-file")
		}
		if host, _, err := net.SplitHostPort(o.metricsAddress); err == nil && !isLoopback(host) {
			errs.bad("metrics-secure", "false serves /metrics to anyone who reaches --metrics-address, so only on a loopback address, not %q; serve it securely (the default) to scrape it from elsewhere", o.metricsAddress)
		}
		return
	}
	if (o.metricsCertFile == "") != (o.metricsKeyFile == "") {
		errs.bad("metrics-tls-private-key-file", "give both --metrics-tls-cert-file and --metrics-tls-private-key-file, or neither (a self-signed certificate)")
	}
	checkFile(errs, "metrics-tls-cert-file", o.metricsCertFile)
	checkFile(errs, "metrics-tls-private-key-file", o.metricsKeyFile)
}

// isLoopback says whether a listen host reaches only the host's own
// processes.
func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

// loggingFlag is the flag of a field of the logging configuration.
func loggingFlag(field string) string {
	for prefix, flagName := range map[string]string{
		"flushFrequency":           logsapi.LogFlushFreqFlagName,
		"verbosity":                "v",
		"vmodule":                  "vmodule",
		"options.text.splitStream": "log-text-split-stream",
		"options.text.infoBuffer":  "log-text-info-buffer-size",
		"options.json.splitStream": "log-json-split-stream",
		"options.json.infoBuffer":  "log-json-info-buffer-size",
	} {
		if strings.HasPrefix(field, prefix) {
			return flagName
		}
	}
	return "logging-format"
}

func (o *options) runs(component string) bool { return slices.Contains(o.components, component) }

func (o *options) runsControllers() bool {
	return o.runs(componentExporter) || o.runs(componentImporter)
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

// vipBlocksInside says which of blocks lies outside ranges.
func vipBlocksInside(blocks, ranges []netip.Prefix) error {
	for _, block := range blocks {
		set, ok := prefixOfFamily(ranges, block.Addr().Is4())
		if !ok || !set.Contains(block.Addr()) || block.Bits() < set.Bits() {
			return fmt.Errorf("%s is not inside the clusterset ranges %s", block, joinPrefixes(ranges))
		}
	}
	return nil
}

// joinPrefixes spells prefixes as a list flag takes them.
func joinPrefixes(prefixes []netip.Prefix) string {
	s := make([]string, len(prefixes))
	for i, p := range prefixes {
		s[i] = p.String()
	}
	return strings.Join(s, ",")
}

func prefixOfFamily(prefixes []netip.Prefix, v4 bool) (netip.Prefix, bool) {
	for _, p := range prefixes {
		if p.Addr().Is4() == v4 {
			return p, true
		}
	}
	return netip.Prefix{}, false
}
