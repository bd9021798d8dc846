package exporter

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/mcsd-io/mcsd/internal/conditiongauge"
)

// Metrics are the exporter's Prometheus metrics.
type Metrics struct {
	syncs        *prometheus.CounterVec
	syncDuration prometheus.Histogram
	writes       *prometheus.CounterVec
	conditions   *conditiongauge.Gauge
	leaseRenewal *prometheus.CounterVec
}

// NewMetrics registers the exporter's metrics on reg (nil: unregistered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		syncs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "mcsd", Subsystem: "exporter", Name: "syncs_total",
			Help: "Export syncs by result (success, error).",
		}, []string{"result"}),
		syncDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "mcsd", Subsystem: "exporter", Name: "sync_duration_seconds",
			Help: "Time to sync one export with the broker.", Buckets: prometheus.ExponentialBuckets(0.001, 2, 15),
		}),
		writes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "mcsd", Subsystem: "exporter", Name: "broker_writes_total",
			Help: "Writes to the broker by kind (record, endpointslice) and operation.",
		}, []string{"kind", "operation"}),
		conditions: conditiongauge.New("serviceexports_by_condition", "ServiceExports by condition type, status and reason."),
		leaseRenewal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "mcsd", Subsystem: "exporter", Name: "lease_renewals_total",
			Help: "Broker Lease renewals by result (success, error).",
		}, []string{"result"}),
	}
	if reg != nil {
		reg.MustRegister(m.syncs, m.syncDuration, m.writes, m.conditions.Collector(), m.leaseRenewal)
	}
	return m
}

func (m *Metrics) observeSync(d time.Duration, err error) {
	m.syncDuration.Observe(d.Seconds())
	if err != nil {
		m.syncs.WithLabelValues("error").Inc()
		return
	}
	m.syncs.WithLabelValues("success").Inc()
}

// ObserveLeaseRenewal counts a heartbeat outcome (wire it to Heartbeat.OnRenew).
func (m *Metrics) ObserveLeaseRenewal(err error) {
	if err != nil {
		m.leaseRenewal.WithLabelValues("error").Inc()
		return
	}
	m.leaseRenewal.WithLabelValues("success").Inc()
}

func (m *Metrics) setCondition(namespace, name string, c metav1.Condition) {
	m.conditions.Set(namespace, name, c)
}

// forget drops the condition gauges of an object that is gone.
func (m *Metrics) forget(namespace, name string) { m.conditions.Forget(namespace, name) }
