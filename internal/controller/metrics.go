package controller

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Metrics are the metrics every controller has, under its subsystem: its
// syncs by result and their duration, its writes by kind and operation,
// and its objects by condition.
type Metrics struct {
	syncs        *prometheus.CounterVec
	syncDuration prometheus.Histogram
	writes       *prometheus.CounterVec
	conditions   *conditionGauge
	// conflicts counts a sync that raced a change apart from one that
	// failed.
	conflicts bool
}

// MetricsOpts name a controller's metrics and say what they count.
type MetricsOpts struct {
	// Subsystem is the controller's: mcsd_<subsystem>_syncs_total, and
	// mcsd_<subsystem>_<ConditionsName>.
	Subsystem                      string
	SyncsHelp, SyncDurationHelp    string
	WritesName, WritesHelp         string
	ConditionsName, ConditionsHelp string
	// Conflicts counts syncs that raced a change (result "conflict")
	// apart from those that failed ("error").
	Conflicts bool
}

// MetricOpts are the options of the metric mcsd_<subsystem>_<name>.
func MetricOpts(subsystem, name, help string) prometheus.Opts {
	return prometheus.Opts{Namespace: "mcsd", Subsystem: subsystem, Name: name, Help: help}
}

// NewMetrics makes the metrics o names and registers them on reg (nil:
// unregistered), with extra collectors of the controller's own.
func NewMetrics(reg prometheus.Registerer, o MetricsOpts, extra ...prometheus.Collector) *Metrics {
	m := &Metrics{
		syncs: prometheus.NewCounterVec(prometheus.CounterOpts(MetricOpts(o.Subsystem, "syncs_total", o.SyncsHelp)), []string{"result"}),
		syncDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "mcsd", Subsystem: o.Subsystem, Name: "sync_duration_seconds",
			Help: o.SyncDurationHelp, Buckets: prometheus.ExponentialBuckets(0.001, 2, 15),
		}),
		writes:     prometheus.NewCounterVec(prometheus.CounterOpts(MetricOpts(o.Subsystem, o.WritesName, o.WritesHelp)), []string{"kind", "operation"}),
		conditions: newConditionGauge(o.Subsystem, o.ConditionsName, o.ConditionsHelp),
		conflicts:  o.Conflicts,
	}
	if reg != nil {
		reg.MustRegister(append([]prometheus.Collector{m.syncs, m.syncDuration, m.writes, m.conditions.Collector()}, extra...)...)
	}
	return m
}

// ObserveSync counts a sync that took d and ended with err.
func (m *Metrics) ObserveSync(d time.Duration, err error) {
	m.syncDuration.Observe(d.Seconds())
	switch {
	case m.conflicts && apierrors.IsConflict(err):
		m.syncs.WithLabelValues("conflict").Inc()
	case err != nil:
		m.syncs.WithLabelValues("error").Inc()
	default:
		m.syncs.WithLabelValues("success").Inc()
	}
}

// Wrote counts a write of kind (such as "serviceimport") by operation
// (create, update, delete, ...).
func (m *Metrics) Wrote(kind, operation string) { m.writes.WithLabelValues(kind, operation).Inc() }

// SetCondition counts the object namespace/name in condition c.
func (m *Metrics) SetCondition(namespace, name string, c metav1.Condition) {
	m.conditions.Set(namespace, name, c)
}

// Forget drops the conditions of an object that is gone.
func (m *Metrics) Forget(namespace, name string) { m.conditions.Forget(namespace, name) }
