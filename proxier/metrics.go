package proxier

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
)

// metrics are the proxier's Prometheus metrics, named and labelled as
// kube-proxy's are (under "mcsd_proxier_" instead of "kubeproxy_") so that
// dashboards and alerts carry over: one histogram for every sync and one each
// for full and partial syncs, the change counters, the last-sync timestamps.
// Every metric has an ip_family label; the proxiers of both families share
// one set.
type metrics struct {
	syncDuration           *prometheus.HistogramVec
	syncFullDuration       *prometheus.HistogramVec
	syncPartialDuration    *prometheus.HistogramVec
	noLocalEndpoints       *prometheus.GaugeVec
	networkProgramming     *prometheus.HistogramVec
	lastSync               *prometheus.GaugeVec
	lastQueued             *prometheus.GaugeVec
	serviceChangesPending  *prometheus.GaugeVec
	endpointChangesPending *prometheus.GaugeVec
	serviceChangesTotal    *prometheus.CounterVec
	endpointChangesTotal   *prometheus.CounterVec
	syncFailures           *prometheus.CounterVec
	// iptablesRestoreFailures counts failed syncs in iptables mode, under
	// kube-proxy's name for them.
	iptablesRestoreFailures *prometheus.CounterVec
	cleanupFailures         *prometheus.CounterVec
	conntrackDeleted        *prometheus.CounterVec
	conntrackFailures       *prometheus.CounterVec
	vipsRefused             *prometheus.CounterVec
}

const (
	metricsNamespace = "mcsd"
	metricsSubsystem = "proxier"
)

// syncBuckets are the sync duration buckets, 1 ms to 32 s.
var syncBuckets = prometheus.ExponentialBuckets(0.001, 2, 16)

// newMetrics creates the metrics and registers them with reg (nil: not
// registered). A metric that reg already holds, from the proxier of the
// other family, is shared.
func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	opts := func(name, help string) (string, string, string, string) {
		return metricsNamespace, metricsSubsystem, name, help
	}
	histogram := func(name, help string, buckets []float64) *prometheus.HistogramVec {
		ns, sub, n, h := opts(name, help)
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub, Name: n, Help: h, Buckets: buckets},
			[]string{"ip_family"})
	}
	gauge := func(name, help string) *prometheus.GaugeVec {
		ns, sub, n, h := opts(name, help)
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: n, Help: h}, []string{"ip_family"})
	}
	counter := func(name, help string) *prometheus.CounterVec {
		ns, sub, n, h := opts(name, help)
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: n, Help: h}, []string{"ip_family"})
	}
	m := &metrics{
		syncDuration: histogram("sync_proxy_rules_duration_seconds",
			"Time a sync of the rules (nftables or iptables) took, full or partial.", syncBuckets),
		syncFullDuration: histogram("sync_full_proxy_rules_duration_seconds",
			"Time a full sync of the rules took.", syncBuckets),
		syncPartialDuration: histogram("sync_partial_proxy_rules_duration_seconds",
			"Time a partial sync of the rules took.", syncBuckets),
		noLocalEndpoints: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: metricsNamespace, Subsystem: metricsSubsystem,
			// kube-proxy's gauge ends in _total; a gauge does not.
			Name: "sync_proxy_rules_no_local_endpoints",
			Help: "Service ports with internalTrafficPolicy Local whose traffic is dropped for want of local endpoints."},
			[]string{"traffic_policy", "ip_family"}),
		networkProgramming: histogram("network_programming_duration_seconds",
			"Time from a change to a ServiceImport or MCS EndpointSlice to the rules that apply it.",
			prometheus.ExponentialBuckets(0.01, 2, 17)),
		lastSync:   gauge("sync_proxy_rules_last_timestamp_seconds", "When the last successful sync finished (Unix time)."),
		lastQueued: gauge("sync_proxy_rules_last_queued_timestamp_seconds", "When a sync was last requested (Unix time)."),
		serviceChangesPending: gauge("sync_proxy_rules_service_changes_pending",
			"ServiceImport changes waiting for the next sync."),
		endpointChangesPending: gauge("sync_proxy_rules_endpoint_changes_pending",
			"Services with EndpointSlice changes waiting for the next sync."),
		serviceChangesTotal: counter("sync_proxy_rules_service_changes_total",
			"ServiceImport changes seen."),
		endpointChangesTotal: counter("sync_proxy_rules_endpoint_changes_total",
			"EndpointSlice changes seen."),
		syncFailures: counter("sync_proxy_rules_nftables_sync_failures_total",
			"Syncs whose nftables transaction failed."),
		iptablesRestoreFailures: counter("sync_proxy_rules_iptables_restore_failures_total",
			"Syncs whose iptables-restore (or jump check) failed, in iptables mode."),
		cleanupFailures: counter("sync_proxy_rules_nftables_cleanup_failures_total",
			"Failed deletions of stale nftables chains."),
		conntrackDeleted: counter("conntrack_deleted_entries_total",
			"Conntrack entries of UDP flows to removed endpoints that were deleted."),
		conntrackFailures: counter("conntrack_cleanup_failures_total",
			"Failed deletions of conntrack entries."),
		vipsRefused: counter("clusterset_ips_refused_total",
			"ServiceImport events whose ClusterSetIP lies outside the clusterset CIDRs, which get no rules."),
	}
	if reg == nil {
		return m, nil
	}
	var errs []error
	registerShared(reg, &m.syncDuration, &errs)
	registerShared(reg, &m.syncFullDuration, &errs)
	registerShared(reg, &m.syncPartialDuration, &errs)
	registerShared(reg, &m.noLocalEndpoints, &errs)
	registerShared(reg, &m.networkProgramming, &errs)
	registerShared(reg, &m.lastSync, &errs)
	registerShared(reg, &m.lastQueued, &errs)
	registerShared(reg, &m.serviceChangesPending, &errs)
	registerShared(reg, &m.endpointChangesPending, &errs)
	registerShared(reg, &m.serviceChangesTotal, &errs)
	registerShared(reg, &m.endpointChangesTotal, &errs)
	registerShared(reg, &m.syncFailures, &errs)
	registerShared(reg, &m.iptablesRestoreFailures, &errs)
	registerShared(reg, &m.cleanupFailures, &errs)
	registerShared(reg, &m.conntrackDeleted, &errs)
	registerShared(reg, &m.conntrackFailures, &errs)
	registerShared(reg, &m.vipsRefused, &errs)
	if len(errs) > 0 {
		return nil, fmt.Errorf("registering proxier metrics: %w", errors.Join(errs...))
	}
	return m, nil
}

// startFailures exports the sync failures counter of mode and family at 0,
// as kube-proxy's are from the start: rate() and the alert on it then see
// the first failure, which a series born at 1 would hide.
func (m *metrics) startFailures(mode Mode, family v1.IPFamily) {
	if mode == ModeIPTables {
		m.iptablesRestoreFailures.WithLabelValues(string(family))
		return
	}
	m.syncFailures.WithLabelValues(string(family))
}

// registerShared registers *c with reg, or replaces *c with the collector of
// the same name that reg already holds.
func registerShared[T prometheus.Collector](reg prometheus.Registerer, c *T, errs *[]error) {
	err := reg.Register(*c)
	if err == nil {
		return
	}
	var already prometheus.AlreadyRegisteredError
	if errors.As(err, &already) {
		if existing, ok := already.ExistingCollector.(T); ok {
			*c = existing
			return
		}
	}
	*errs = append(*errs, err)
}
