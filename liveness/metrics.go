package liveness

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the liveness controller's Prometheus metrics. They keep the
// names they had when the importer decided liveness (mcsd_importer_...):
// dashboards and alerts know them by these.
type Metrics struct {
	liveClusters    prometheus.Gauge
	brokerReachable prometheus.Gauge
	dropped         *prometheus.CounterVec
}

// NewMetrics registers the liveness metrics on reg (nil: unregistered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
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
		reg.MustRegister(m.liveClusters, m.brokerReachable, m.dropped)
	}
	return m
}

func (m *Metrics) setLiveClusters(n int) { m.liveClusters.Set(float64(n)) }

func (m *Metrics) setBrokerReachable(ok bool) {
	if ok {
		m.brokerReachable.Set(1)
		return
	}
	m.brokerReachable.Set(0)
}

func (m *Metrics) clusterDropped(cluster string) { m.dropped.WithLabelValues(cluster).Inc() }
