package exporter

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/mcsd-io/mcsd/internal/controller"
)

// Metrics are the exporter's Prometheus metrics: a controller's (syncs,
// broker writes, ServiceExports by condition) and the heartbeat's.
type Metrics struct {
	*controller.Metrics
	leaseRenewal *prometheus.CounterVec
}

// NewMetrics registers the exporter's metrics on reg (nil: unregistered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	renewals := controller.MetricOpts("exporter", "lease_renewals_total", "Broker Lease renewals by result (success, error; standby: renewed by a standby replica for a leader that stopped renewing it).")
	m := &Metrics{leaseRenewal: prometheus.NewCounterVec(prometheus.CounterOpts(renewals), []string{"result"})}
	m.Metrics = controller.NewMetrics(reg, controller.MetricsOpts{
		Subsystem:        "exporter",
		SyncsHelp:        "Export syncs by result (success, error).",
		SyncDurationHelp: "Time to sync one export with the broker.",
		WritesName:       "broker_writes_total",
		WritesHelp:       "Writes to the broker by kind (record, endpointslice) and operation.",
		ConditionsName:   "serviceexports_by_condition",
		ConditionsHelp:   "ServiceExports by condition type, status and reason.",
	}, m.leaseRenewal)
	return m
}

// ObserveLeaseRenewal counts a heartbeat outcome (wire it to Heartbeat.OnRenew).
func (m *Metrics) ObserveLeaseRenewal(err error) {
	if err != nil {
		m.leaseRenewal.WithLabelValues("error").Inc()
		return
	}
	m.leaseRenewal.WithLabelValues("success").Inc()
}

// ObserveStandInRenewal counts a renewal a standby replica made for a
// leader that stopped renewing (wire it to Heartbeat.OnStoodIn).
func (m *Metrics) ObserveStandInRenewal() {
	m.leaseRenewal.WithLabelValues("standby").Inc()
}
