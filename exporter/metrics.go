package exporter

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Metrics are the exporter's Prometheus metrics.
type Metrics struct {
	syncs        *prometheus.CounterVec
	syncDuration prometheus.Histogram
	writes       *prometheus.CounterVec
	conditions   *prometheus.GaugeVec
	leaseRenewal *prometheus.CounterVec

	mu    sync.Mutex
	known map[[2]string][]string // export -> condition types reported
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
		conditions: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "mcsd", Name: "serviceexport_condition",
			Help: "1 for the current status of each ServiceExport condition.",
		}, []string{"namespace", "name", "condition", "status"}),
		leaseRenewal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "mcsd", Subsystem: "exporter", Name: "lease_renewals_total",
			Help: "Broker Lease renewals by result (success, error).",
		}, []string{"result"}),
		known: map[[2]string][]string{},
	}
	if reg != nil {
		reg.MustRegister(m.syncs, m.syncDuration, m.writes, m.conditions, m.leaseRenewal)
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
	for _, st := range []metav1.ConditionStatus{metav1.ConditionTrue, metav1.ConditionFalse, metav1.ConditionUnknown} {
		v := 0.0
		if c.Status == st {
			v = 1
		}
		m.conditions.WithLabelValues(namespace, name, c.Type, string(st)).Set(v)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	key := [2]string{namespace, name}
	for _, t := range m.known[key] {
		if t == c.Type {
			return
		}
	}
	m.known[key] = append(m.known[key], c.Type)
}

// forget drops the gauges of an export that is gone.
func (m *Metrics) forget(namespace, name string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	key := [2]string{namespace, name}
	for _, t := range m.known[key] {
		for _, st := range []metav1.ConditionStatus{metav1.ConditionTrue, metav1.ConditionFalse, metav1.ConditionUnknown} {
			m.conditions.DeleteLabelValues(namespace, name, t, string(st))
		}
	}
	delete(m.known, key)
}
