package importer

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/mcsd-io/mcsd/internal/conditiongauge"
)

// Metrics are the importer's Prometheus metrics.
type Metrics struct {
	syncs           *prometheus.CounterVec
	syncDuration    prometheus.Histogram
	writes          *prometheus.CounterVec
	conditions      *conditiongauge.Gauge
	liveClusters    prometheus.Gauge
	brokerReachable prometheus.Gauge
	dropped         *prometheus.CounterVec
	ignoredRecords  *prometheus.CounterVec
	rejectedVIPs    *prometheus.CounterVec
	droppedEPs      *prometheus.CounterVec
	undeclared      prometheus.Gauge
	overCap         *prometheus.GaugeVec
}

// NewMetrics registers the importer's metrics on reg (nil: unregistered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		syncs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "mcsd", Subsystem: "importer", Name: "syncs_total",
			Help: "Service imports synced, by result (success, conflict: a write raced a change and is retried, error).",
		}, []string{"result"}),
		syncDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "mcsd", Subsystem: "importer", Name: "sync_duration_seconds",
			Help: "Time to sync one imported service.", Buckets: prometheus.ExponentialBuckets(0.001, 2, 15),
		}),
		writes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "mcsd", Subsystem: "importer", Name: "local_writes_total",
			Help: "Writes to the local cluster by kind (serviceimport, endpointslice) and operation.",
		}, []string{"kind", "operation"}),
		conditions: conditiongauge.New("serviceimports_by_condition", "ServiceImports by condition type, status and reason."),
		liveClusters: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "mcsd", Subsystem: "importer", Name: "live_clusters",
			Help: "Clusters whose broker Lease was renewed within the TTL, this one included.",
		}),
		brokerReachable: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "mcsd", Subsystem: "importer", Name: "broker_reachable",
			Help: "1 while the broker answers; 0 while the importer serves the last known state.",
		}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "mcsd", Subsystem: "importer", Name: "cluster_dropped_total",
			Help: "Times a cluster's endpoints were dropped because its broker Lease expired, by cluster.",
		}, []string{"cluster"}),
		ignoredRecords: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "mcsd", Subsystem: "importer", Name: "ignored_records_total",
			Help: "Broker export records ignored whole, by reason (NamespaceDenied: as they arrive; OverServiceCap: as a cluster's cap is reevaluated; ClusterGonePastGrace: as a cluster's grace runs out; ExportNotAllowed: as a service's sync leaves out a record the broker's export rules keep out).",
		}, []string{"reason"}),
		rejectedVIPs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "mcsd", Subsystem: "importer", Name: "rejected_clustersetips_total",
			Help: "ClusterSetIPs of broker records ignored, by reason (ClusterSetIPOutsideRange, ClusterSetIPNotOwned); each counted once when first rejected.",
		}, []string{"reason"}),
		droppedEPs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "mcsd", Subsystem: "importer", Name: "dropped_endpoints_total",
			Help: "Remote endpoints not imported, by reason (EndpointsOutsidePodCIDRs); counted as a service's number of dropped endpoints grows.",
		}, []string{"reason"}),
		undeclared: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "mcsd", Subsystem: "importer", Name: "clusters_without_declaration",
			Help: "Clusters with endpoints but no member declaration on the broker, whose endpoints are imported unchecked.",
		}),
		overCap: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "mcsd", Subsystem: "importer", Name: "records_over_cap",
			Help: "Export records of a cluster ignored because it has more than the cap, by cluster (0 when within it).",
		}, []string{"cluster"}),
	}
	if reg != nil {
		reg.MustRegister(m.syncs, m.syncDuration, m.writes, m.conditions.Collector(), m.liveClusters, m.brokerReachable, m.dropped,
			m.ignoredRecords, m.rejectedVIPs, m.droppedEPs, m.undeclared, m.overCap)
	}
	return m
}

func (m *Metrics) observeSync(d time.Duration, err error) {
	m.syncDuration.Observe(d.Seconds())
	switch {
	case apierrors.IsConflict(err):
		m.syncs.WithLabelValues("conflict").Inc()
	case err != nil:
		m.syncs.WithLabelValues("error").Inc()
	default:
		m.syncs.WithLabelValues("success").Inc()
	}
}

func (m *Metrics) wrote(kind, operation string) { m.writes.WithLabelValues(kind, operation).Inc() }

func (m *Metrics) setLiveClusters(n int) { m.liveClusters.Set(float64(n)) }

func (m *Metrics) setBrokerReachable(ok bool) {
	if ok {
		m.brokerReachable.Set(1)
		return
	}
	m.brokerReachable.Set(0)
}

func (m *Metrics) clusterDropped(cluster string) { m.dropped.WithLabelValues(cluster).Inc() }

func (m *Metrics) setCondition(namespace, name string, c metav1.Condition) {
	m.conditions.Set(namespace, name, c)
}

// forget drops the condition gauges of an object that is gone.
func (m *Metrics) forget(namespace, name string) { m.conditions.Forget(namespace, name) }

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
