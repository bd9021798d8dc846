package liveness

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/mcsd-io/mcsd/internal/controller"
)

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
	opts := func(name, help string) prometheus.Opts { return controller.MetricOpts("importer", name, help) }
	m := &Metrics{
		liveClusters: prometheus.NewGauge(prometheus.GaugeOpts(opts("live_clusters",
			"Clusters whose broker Lease was renewed within the TTL, this one included."))),
		brokerReachable: prometheus.NewGauge(prometheus.GaugeOpts(opts("broker_reachable",
			"1 while the broker answers; 0 while the importer serves the last known state."))),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts(opts("cluster_dropped_total",
			"Times a cluster's endpoints were dropped because its broker Lease expired, by cluster.")), []string{"cluster"}),
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
