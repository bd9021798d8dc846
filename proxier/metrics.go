package proxier

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the proxier's Prometheus metrics, named as kube-proxy's are
// (under "mcsd_proxier_" instead of "kubeproxy_") so that dashboards carry
// over. Every metric has an ip_family label; the proxiers of both families
// share one set.
type metrics struct {
	syncDuration           *prometheus.HistogramVec
	networkProgramming     *prometheus.HistogramVec
	lastSync               *prometheus.GaugeVec
	lastQueued             *prometheus.GaugeVec
	serviceChangesPending  *prometheus.GaugeVec
	endpointChangesPending *prometheus.GaugeVec
	serviceChangesTotal    *prometheus.CounterVec
	endpointChangesTotal   *prometheus.CounterVec
	syncFailures           *prometheus.CounterVec
	cleanupFailures        *prometheus.CounterVec
	conntrackDeleted       *prometheus.CounterVec
	conntrackFailures      *prometheus.CounterVec
}

const (
	metricsNamespace = "mcsd"
	metricsSubsystem = "proxier"
)

// newMetrics creates the metrics and registers them with reg (nil: not
// registered). A metric that reg already holds, from the proxier of the
// other family, is shared.
func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	opts := func(name, help string) (string, string, string, string) {
		return metricsNamespace, metricsSubsystem, name, help
	}
	histogram := func(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
		ns, sub, n, h := opts(name, help)
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub, Name: n, Help: h, Buckets: buckets},
			append([]string{"ip_family"}, labels...))
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
			"Time a sync of the nftables rules took, by kind of sync (full or partial).",
			prometheus.ExponentialBuckets(0.001, 2, 16), "sync"),
		networkProgramming: histogram("network_programming_duration_seconds",
			"Time from a change to a ServiceImport or MCS EndpointSlice to the nftables rules that apply it.",
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
		cleanupFailures: counter("sync_proxy_rules_nftables_cleanup_failures_total",
			"Failed deletions of stale nftables chains."),
		conntrackDeleted: counter("conntrack_deleted_entries_total",
			"Conntrack entries of UDP flows to removed endpoints that were deleted."),
		conntrackFailures: counter("conntrack_cleanup_failures_total",
			"Failed deletions of conntrack entries."),
	}
	if reg == nil {
		return m, nil
	}
	var errs []error
	registerShared(reg, &m.syncDuration, &errs)
	registerShared(reg, &m.networkProgramming, &errs)
	registerShared(reg, &m.lastSync, &errs)
	registerShared(reg, &m.lastQueued, &errs)
	registerShared(reg, &m.serviceChangesPending, &errs)
	registerShared(reg, &m.endpointChangesPending, &errs)
	registerShared(reg, &m.serviceChangesTotal, &errs)
	registerShared(reg, &m.endpointChangesTotal, &errs)
	registerShared(reg, &m.syncFailures, &errs)
	registerShared(reg, &m.cleanupFailures, &errs)
	registerShared(reg, &m.conntrackDeleted, &errs)
	registerShared(reg, &m.conntrackFailures, &errs)
	if len(errs) > 0 {
		return nil, fmt.Errorf("registering proxier metrics: %w", errors.Join(errs...))
	}
	return m, nil
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
