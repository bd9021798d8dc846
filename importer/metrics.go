package importer

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/mcsd-io/mcsd/internal/controller"
)

// Metrics are the importer's Prometheus metrics: a controller's (syncs,
// local writes, ServiceImports by condition) and what it ignores or
// rejects of the records.
type Metrics struct {
	*controller.Metrics
	ignoredRecords *prometheus.CounterVec
	rejectedVIPs   *prometheus.CounterVec
	droppedEPs     *prometheus.CounterVec
	undeclared     prometheus.Gauge
	overCap        *prometheus.GaugeVec
}

// NewMetrics registers the importer's metrics on reg (nil: unregistered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	counter := func(name, help, label string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts(controller.MetricOpts("importer", name, help)), []string{label})
	}
	m := &Metrics{
		ignoredRecords: counter("ignored_records_total",
			"Broker export records ignored whole, by reason (NamespaceDenied: as they arrive; OverServiceCap: as a cluster's cap is reevaluated; ClusterGonePastGrace: as a cluster's grace runs out; ExportNotAllowed: as a service's sync leaves out a record the broker's export rules keep out).", "reason"),
		rejectedVIPs: counter("rejected_clustersetips_total",
			"ClusterSetIPs of broker records ignored, by reason (ClusterSetIPOutsideRange, ClusterSetIPNotOwned); each counted once when first rejected.", "reason"),
		droppedEPs: counter("dropped_endpoints_total",
			"Remote endpoints not imported, by reason (EndpointsOutsidePodCIDRs); counted as a service's number of dropped endpoints grows.", "reason"),
		undeclared: prometheus.NewGauge(prometheus.GaugeOpts(controller.MetricOpts("importer", "clusters_without_declaration",
			"Clusters with endpoints but no member declaration on the broker, whose endpoints are imported unchecked."))),
		overCap: prometheus.NewGaugeVec(prometheus.GaugeOpts(controller.MetricOpts("importer", "records_over_cap",
			"Export records of a cluster ignored because it has more than the cap, by cluster (0 when within it).")), []string{"cluster"}),
	}
	m.Metrics = controller.NewMetrics(reg, controller.MetricsOpts{
		Subsystem:        "importer",
		SyncsHelp:        "Service imports synced, by result (success, conflict: a write raced a change and is retried, error).",
		SyncDurationHelp: "Time to sync one imported service.",
		WritesName:       "local_writes_total",
		WritesHelp:       "Writes to the local cluster by kind (serviceimport, endpointslice) and operation.",
		ConditionsName:   "serviceimports_by_condition",
		ConditionsHelp:   "ServiceImports by condition type, status and reason.",
		Conflicts:        true,
	}, m.ignoredRecords, m.rejectedVIPs, m.droppedEPs, m.undeclared, m.overCap)
	return m
}

func (m *Metrics) ignoredRecord(reason string, n int) {
	if n > 0 {
		m.ignoredRecords.WithLabelValues(reason).Add(float64(n))
	}
}

// rejected counts n newly rejected things of a rejection reason: VIPs or
// endpoints.
func (m *Metrics) rejected(reason string, n int) {
	if n <= 0 {
		return
	}
	if reason == ReasonExportNotAllowed {
		m.ignoredRecords.WithLabelValues(reason).Add(float64(n))
		return
	}
	if reason == ReasonEndpointsOutsidePodCIDRs {
		m.droppedEPs.WithLabelValues(reason).Add(float64(n))
		return
	}
	m.rejectedVIPs.WithLabelValues(reason).Add(float64(n))
}

func (m *Metrics) setUndeclaredClusters(n int) { m.undeclared.Set(float64(n)) }

func (m *Metrics) setOverCap(cluster string, ignored int) {
	if ignored == 0 {
		m.overCap.DeleteLabelValues(cluster)
		return
	}
	m.overCap.WithLabelValues(cluster).Set(float64(ignored))
}
