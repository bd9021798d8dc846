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
	}
	if reg != nil {
		reg.MustRegister(m.syncs, m.syncDuration, m.writes, m.conditions.Collector(), m.liveClusters, m.brokerReachable, m.dropped)
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
