package proxier

import (
	"context"
	"fmt"
	"math/bits"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"sigs.k8s.io/knftables"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/mcsd-io/mcsd/proxier/netfilter"
)

// DefaultMasqueradeMark is the packet mark bit the proxier sets on traffic
// to masquerade, unless [Config.MasqueradeMark] says otherwise. It is bit 12,
// not kube-proxy's 0x4000: README.md explains the choice.
const DefaultMasqueradeMark uint32 = 0x1000

// Defaults for the sync periods in [Config].
const (
	DefaultMinSyncPeriod  = time.Second
	DefaultSyncPeriod     = 30 * time.Second
	DefaultFullSyncPeriod = time.Hour
)

// Config configures a [Proxier] or a [DualStack]. ClusterID (and for [New],
// IPFamily) is required; every other field has a default.
type Config struct {
	// ClusterID is the ID of this node's cluster: endpoints whose
	// EndpointSlice has it as multicluster.kubernetes.io/source-cluster are
	// local.
	ClusterID string
	// NodeName is this node's name. When set, internalTrafficPolicy Local
	// means this node's endpoints of the local cluster; when empty, all
	// endpoints of the local cluster.
	NodeName string
	// IPFamily is the family [New]'s proxier serves: v1.IPv4Protocol or
	// v1.IPv6Protocol. [NewDualStack] runs one per family and ignores it.
	IPFamily v1.IPFamily

	// Mode is the backend: [ModeNFTables] (the default, also when empty),
	// [ModeIPTables], or [ModeAuto], nftables when the host meets its
	// requirements, else iptables.
	Mode Mode
	// InNetns runs fn inside the network namespace whose rules the proxier
	// programs; nil means the calling thread's. The nft and iptables
	// commands, the conntrack handle and the rule counter the proxier
	// makes are made and run through it. mcsd passes nsenter.Do bound to
	// its --netns.
	InNetns func(fn func() error) error
	// NFTables is the nftables interface for table [TableName] of IPFamily's
	// family ("ip" or "ip6"), in nftables mode. Nil means the proxier makes
	// it on this host; tests pass knftables.NewFake. [NewDualStack] makes
	// each family's.
	NFTables knftables.Interface
	// IPTables is IPFamily's iptables (or ip6tables), in iptables mode. Nil
	// means [netfilter.NewIPTables] on this host; tests pass a fake.
	// [NewDualStack] makes each family's.
	IPTables netfilter.IPTables
	// Conntrack deletes stale UDP conntrack entries. Nil means
	// [netfilter.NewConntrack] in InNetns; a CNI that clears conntrack
	// itself passes its own.
	Conntrack netfilter.Conntrack
	// RuleCounter is how the proxier checks, once per sync period, that
	// its table was not flushed or deleted behind its back. Nil means
	// [netfilter.NewRuleCounter] of [TableName] in InNetns (never "nft
	// list", which costs as much as the whole table with nft 1.0.x). Tests
	// on knftables.NewFake pass one that counts the Fake's rules. Unused in
	// iptables mode, which checks its jump from nat PREROUTING instead.
	RuleCounter netfilter.RuleCounter

	// MasqueradeMark is the single mark bit that flags packets for
	// masquerading between the nat hooks. Zero means
	// [DefaultMasqueradeMark].
	MasqueradeMark uint32
	// MasqueradeAll masquerades all traffic to ClusterSetIPs.
	MasqueradeAll bool
	// PodCIDRs are the CIDRs of this cluster's pod network (either family;
	// each proxier takes its own). Traffic to a ClusterSetIP from any other
	// source (this node's own addresses, other hosts) is masqueraded so
	// that replies come back through this node. Empty means no such
	// masquerading (only hairpin traffic is masqueraded) unless
	// MasqueradeAll.
	PodCIDRs []string
	// PreferLocalCluster treats every ServiceImport as if it had
	// trafficDistribution PreferClose: endpoints of the local cluster are
	// used while there are any.
	PreferLocalCluster bool
	// ClusterSetCIDRs are the ranges ClusterSetIPs come from (either
	// family; each proxier takes its own). A ServiceImport whose
	// ClusterSetIP lies outside them gets no rules: the importer refuses
	// such VIPs already, and this second check keeps a forged record or a
	// hand-written ServiceImport from redirecting an address such as a
	// node's, the cloud metadata server's or a Service's ClusterIP. Empty
	// means any address.
	ClusterSetCIDRs []netip.Prefix

	// MinSyncPeriod is the least time between two syncs (default
	// DefaultMinSyncPeriod); changes that arrive meanwhile are applied
	// together.
	MinSyncPeriod time.Duration
	// SyncPeriod is the most time between two syncs (default
	// DefaultSyncPeriod); a sync with nothing to change costs nothing but
	// deleting stale chains.
	SyncPeriod time.Duration
	// FullSyncPeriod is how often the proxier counts the rules of each of
	// its chains and rewrites those whose count is not what it wrote,
	// repairing chains changed behind its back (default
	// DefaultFullSyncPeriod). It costs about as little as any sync.
	FullSyncPeriod time.Duration

	// VIPObserver is told, after each sync that committed rules, which
	// ClusterSetIPs the table now carries and which it no longer carries;
	// nil means nobody. A DNS server that hands out only carried
	// ClusterSetIPs never hands out one that does not route yet.
	VIPObserver VIPObserver

	// Registerer receives the proxier's metrics; nil means none. Both
	// proxiers of a dual-stack pair may use the same one.
	Registerer prometheus.Registerer
	// Health is told about queued and applied updates; nil means nobody.
	Health HealthRecorder
	// SyncFailed is told, after each sync that the kernel refused, why;
	// nil means nobody. It is called from the sync loop: it must not block
	// or call back into the proxier. An embedder records an event with it,
	// as kube-proxy's embedders do on their Node.
	SyncFailed func(family v1.IPFamily, err error)
	// Clock is the time source; nil means the real clock.
	Clock clock.Clock
	// Logger is what the proxier logs with (nil sink: klog.Background());
	// each family's adds its ipFamily.
	Logger klog.Logger
}

// VIPObserver learns which ClusterSetIPs a proxier's committed rules carry.
// VIPsProgrammed is called from the sync loop, after the transaction that
// made the change has been committed, and once after the first full sync
// even if it carried nothing; it must not block or call back into the
// proxier.
type VIPObserver interface {
	VIPsProgrammed(family v1.IPFamily, added, removed []netip.Addr)
}

// Provider is what an embedder drives: the event handlers of its informers
// and the sync loop. [Proxier] and [DualStack] implement it.
type Provider interface {
	// OnServiceImportAdd is called when a ServiceImport is created.
	OnServiceImportAdd(si *mcsv1beta1.ServiceImport)
	// OnServiceImportUpdate is called when a ServiceImport changes.
	OnServiceImportUpdate(old, si *mcsv1beta1.ServiceImport)
	// OnServiceImportDelete is called when a ServiceImport is deleted.
	OnServiceImportDelete(si *mcsv1beta1.ServiceImport)
	// OnServiceImportsSynced is called once the initial ServiceImports
	// have all been delivered.
	OnServiceImportsSynced()
	// OnEndpointSliceAdd is called when an EndpointSlice is created.
	OnEndpointSliceAdd(slice *discoveryv1.EndpointSlice)
	// OnEndpointSliceUpdate is called when an EndpointSlice changes.
	OnEndpointSliceUpdate(old, slice *discoveryv1.EndpointSlice)
	// OnEndpointSliceDelete is called when an EndpointSlice is deleted.
	OnEndpointSliceDelete(slice *discoveryv1.EndpointSlice)
	// OnEndpointSlicesSynced is called once the initial EndpointSlices
	// have all been delivered.
	OnEndpointSlicesSynced()
	// Sync asks for the rules to be brought up to date soon.
	Sync()
	// SyncLoop applies changes until ctx is done.
	SyncLoop(ctx context.Context)
}

// Proxier programs one IP family's nftables table (or, in iptables mode,
// its iptables chains) from ServiceImports and MCS EndpointSlices. Its event
// handlers only record changes; its sync loop applies them in one nftables
// transaction (one iptables-restore per table) per sync. Create it with
// [New].
type Proxier struct {
	family    v1.IPFamily
	policy    trafficPolicy
	backend   backend
	conntrack netfilter.Conntrack
	clock     clock.Clock
	metrics   *metrics
	health    HealthRecorder
	// syncFailed is Config.SyncFailed.
	syncFailed func(v1.IPFamily, error)
	logger     klog.Logger
	tracker    *changeTracker
	runner     *runner
	burst      burstHold

	fullSyncPeriod time.Duration
	// syncPeriod is how often the backend checks that its rules were not
	// changed behind the proxier's back.
	syncPeriod time.Duration

	// initialized is set once both informers have synced; no sync runs
	// before, so as not to program a partial view.
	initialized atomic.Bool

	mu             sync.Mutex // guards everything below; held by syncs
	importsSynced  bool
	slicesSynced   bool
	services       map[types.NamespacedName]*serviceInfo
	slices         map[types.NamespacedName][]*sliceInfo
	vipClaims      map[string]map[types.NamespacedName]bool
	committed      map[types.NamespacedName]*renderedService
	needRewrite    bool
	lastFullSync   time.Time
	lastTableCheck time.Time
	vips           vipReport
}

var _ Provider = (*Proxier)(nil)

// New returns a Proxier for cfg. It resolves [ModeAuto] and, for what cfg
// leaves it to make on this host, checks the host's requirements
// ([CheckRequirements]) and deletes what the other mode left there
// ([CleanupLeftovers]), so that a node switched between modes keeps no rules
// of the first. It programs nothing until its first sync.
func New(cfg Config) (*Proxier, error) {
	if cfg.IPFamily != v1.IPv4Protocol && cfg.IPFamily != v1.IPv6Protocol {
		return nil, fmt.Errorf("proxier: IP family %q is neither %s nor %s", cfg.IPFamily, v1.IPv4Protocol, v1.IPv6Protocol)
	}
	cfg, err := prepareHost(cfg)
	if err != nil {
		return nil, err
	}
	return newProxier(cfg)
}

// newProxier is New on a prepared host: cfg's Mode is resolved, its
// Conntrack (and in nftables mode its RuleCounter) set.
func newProxier(cfg Config) (*Proxier, error) {
	o, err := checkConfig(cfg)
	if err != nil {
		return nil, err
	}
	clk := cfg.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	if cfg.Logger.GetSink() == nil {
		cfg.Logger = klog.Background()
	}
	logger := klog.LoggerWithValues(cfg.Logger, "ipFamily", cfg.IPFamily)
	b, err := newBackend(cfg, o, m, logger)
	if err != nil {
		return nil, err
	}
	m.startFailures(cfg.Mode, cfg.IPFamily)
	p := &Proxier{
		family: cfg.IPFamily,
		policy: trafficPolicy{
			localCluster:       cfg.ClusterID,
			nodeName:           cfg.NodeName,
			preferLocalCluster: cfg.PreferLocalCluster,
		},
		backend:        b,
		conntrack:      cfg.Conntrack,
		clock:          clk,
		metrics:        m,
		health:         cfg.Health,
		syncFailed:     cfg.SyncFailed,
		logger:         logger,
		tracker:        newChangeTracker(cfg.IPFamily, o.clusterSetCIDRs, clk, m, logger),
		fullSyncPeriod: orDefault(cfg.FullSyncPeriod, DefaultFullSyncPeriod),
		syncPeriod:     o.syncPeriod,
		vips:           newVIPReport(cfg.VIPObserver),
		services:       map[types.NamespacedName]*serviceInfo{},
		slices:         map[types.NamespacedName][]*sliceInfo{},
		vipClaims:      map[string]map[types.NamespacedName]bool{},
		committed:      map[types.NamespacedName]*renderedService{},
		needRewrite:    true,
	}
	p.runner = newRunner(p.syncRules, o.minSync, o.syncPeriod, clk)
	return p, nil
}

// options are the settings New derives from a Config: its checked values,
// and those of its family.
type options struct {
	mark            string
	podCIDRs        []string
	clusterSetCIDRs []netip.Prefix
	minSync         time.Duration
	syncPeriod      time.Duration
}

// checkConfig checks cfg and derives the settings of its family.
func checkConfig(cfg Config) (options, error) {
	var o options
	if cfg.ClusterID == "" {
		return o, fmt.Errorf("proxier: a cluster ID is required (the local cluster's multicluster.kubernetes.io/source-cluster value)")
	}
	mark := cfg.MasqueradeMark
	if mark == 0 {
		mark = DefaultMasqueradeMark
	}
	if bits.OnesCount32(mark) != 1 {
		return o, fmt.Errorf("proxier: masquerade mark %#x must be a single bit", mark)
	}
	o.mark = fmt.Sprintf("%#x", mark)
	v4 := cfg.IPFamily == v1.IPv4Protocol
	for _, c := range cfg.PodCIDRs {
		prefix, err := netip.ParsePrefix(c)
		if err != nil {
			return o, fmt.Errorf("proxier: pod CIDR %q: %w", c, err)
		}
		if prefix.Addr().Is4() == v4 {
			o.podCIDRs = append(o.podCIDRs, prefix.Masked().String())
		}
	}
	for _, p := range cfg.ClusterSetCIDRs {
		if p.Addr().Is4() == v4 {
			o.clusterSetCIDRs = append(o.clusterSetCIDRs, p.Masked())
		}
	}
	o.minSync = orDefault(cfg.MinSyncPeriod, DefaultMinSyncPeriod)
	o.syncPeriod = orDefault(cfg.SyncPeriod, DefaultSyncPeriod)
	if o.minSync > o.syncPeriod {
		return o, fmt.Errorf("proxier: minimum sync period %v is longer than the sync period %v", o.minSync, o.syncPeriod)
	}
	return o, nil
}

// newBackend makes the backend of cfg's mode, with its kernel interface:
// cfg's, or one made on this host through cfg.InNetns.
func newBackend(cfg Config, o options, m *metrics, logger klog.Logger) (backend, error) {
	if cfg.Mode == ModeIPTables {
		ipt := cfg.IPTables
		if ipt == nil {
			var err error
			if ipt, err = netfilter.NewIPTables(cfg.IPFamily, cfg.InNetns); err != nil {
				return nil, fmt.Errorf("proxier: iptables for %s is not usable: %w", cfg.IPFamily, err)
			}
		}
		opts := iptablesOptions{family: cfg.IPFamily, mark: o.mark, masqueradeAll: cfg.MasqueradeAll, podCIDRs: o.podCIDRs}
		return &iptablesBackend{family: cfg.IPFamily, options: opts, ipt: ipt, metrics: m, logger: logger}, nil
	}
	w := familyWords(cfg.IPFamily)
	nft := cfg.NFTables
	if nft == nil {
		var err error
		if nft, err = newNFTablesIn(cfg.InNetns, knftables.Family(w.ip)); err != nil {
			return nil, fmt.Errorf("proxier: nftables for %s is not usable (needs nft >= %s and kernel >= %s): %w", cfg.IPFamily, minNFTVersion, minKernelVersion, err)
		}
	}
	static := staticOptions{words: w, mark: o.mark, masqueradeAll: cfg.MasqueradeAll, podCIDRs: o.podCIDRs}
	return newNFTablesBackend(cfg.IPFamily, nft, cfg.RuleCounter, static, m, logger), nil
}

func orDefault(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

// OnServiceImportAdd implements [Provider].
func (p *Proxier) OnServiceImportAdd(si *mcsv1beta1.ServiceImport) {
	p.OnServiceImportUpdate(nil, si)
}

// OnServiceImportUpdate implements [Provider].
func (p *Proxier) OnServiceImportUpdate(old, si *mcsv1beta1.ServiceImport) {
	if p.tracker.serviceUpdate(old, si) && p.initialized.Load() {
		p.Sync()
	}
}

// OnServiceImportDelete implements [Provider].
func (p *Proxier) OnServiceImportDelete(si *mcsv1beta1.ServiceImport) {
	p.OnServiceImportUpdate(si, nil)
}

// OnServiceImportsSynced implements [Provider]. Once EndpointSlices have
// synced too, it asks the sync loop for the first sync.
func (p *Proxier) OnServiceImportsSynced() { p.informerSynced(&p.importsSynced) }

// OnEndpointSliceAdd implements [Provider]. Slices without the
// multicluster.kubernetes.io/service-name label, or of the other family, are
// ignored.
func (p *Proxier) OnEndpointSliceAdd(slice *discoveryv1.EndpointSlice) {
	if p.tracker.sliceUpdate(slice, false) && p.initialized.Load() {
		p.Sync()
	}
}

// OnEndpointSliceUpdate implements [Provider].
func (p *Proxier) OnEndpointSliceUpdate(_, slice *discoveryv1.EndpointSlice) {
	p.OnEndpointSliceAdd(slice)
}

// OnEndpointSliceDelete implements [Provider].
func (p *Proxier) OnEndpointSliceDelete(slice *discoveryv1.EndpointSlice) {
	if p.tracker.sliceUpdate(slice, true) && p.initialized.Load() {
		p.Sync()
	}
}

// OnEndpointSlicesSynced implements [Provider]. Once ServiceImports have
// synced too, it asks the sync loop for the first sync.
func (p *Proxier) OnEndpointSlicesSynced() { p.informerSynced(&p.slicesSynced) }

// informerSynced notes that one informer has synced (sets *synced), and
// once both have, starts syncing.
func (p *Proxier) informerSynced(synced *bool) {
	p.mu.Lock()
	*synced = true
	ready := p.importsSynced && p.slicesSynced
	p.mu.Unlock()
	if !ready {
		return
	}
	p.initialized.Store(true)
	// The first sync writes the whole table, which takes seconds with tens
	// of thousands of imports: the sync loop runs it, not the informer's
	// goroutine that called us.
	p.Sync()
}

// Mode is the mode the proxier runs in: nftables or iptables, never auto.
func (p *Proxier) Mode() Mode { return p.backend.mode() }

// Sync implements [Provider].
func (p *Proxier) Sync() {
	if p.burst.postpone() {
		return
	}
	if p.health != nil {
		p.health.QueuedUpdate(p.family)
	}
	p.metrics.lastQueued.WithLabelValues(string(p.family)).SetToCurrentTime()
	p.runner.Run()
}

// SyncLoop implements [Provider]: it runs syncs as changes ask for them (at
// most every MinSyncPeriod), every SyncPeriod anyway, and a full sync every
// FullSyncPeriod, until ctx is done.
func (p *Proxier) SyncLoop(ctx context.Context) {
	if p.health != nil {
		// Healthy until a queued update is late, even if no sync ever
		// succeeds.
		p.health.Updated(p.family)
	}
	p.metrics.lastQueued.WithLabelValues(string(p.family)).SetToCurrentTime()
	p.runner.Loop(ctx)
}
