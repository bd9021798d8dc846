package importer

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Metrics are the importer's Prometheus metrics.
type Metrics struct {
	syncs           *prometheus.CounterVec
	syncDuration    prometheus.Histogram
	writes          *prometheus.CounterVec
	conditions      *prometheus.GaugeVec
	liveClusters    prometheus.Gauge
	brokerReachable prometheus.Gauge
	dropped         *prometheus.CounterVec

	mu    sync.Mutex
	known map[[2]string][]string // ServiceImport -> condition types reported
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
		conditions: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "mcsd", Name: "serviceimport_condition",
			Help: "1 for the current status of each ServiceImport condition.",
		}, []string{"namespace", "name", "condition", "status"}),
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
		known: map[[2]string][]string{},
	}
	if reg != nil {
		reg.MustRegister(m.syncs, m.syncDuration, m.writes, m.conditions, m.liveClusters, m.brokerReachable, m.dropped)
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

// forget drops the gauges of a ServiceImport that is gone.
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
