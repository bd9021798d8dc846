// Package conditiongauge exports the conditions of mcsd's objects
// (ServiceExports, ServiceImports) as a Prometheus gauge, one series per
// object, condition type and status, 1 for the current status and 0 for the
// others, as kube-state-metrics does for core objects. It forgets an
// object's series when the object goes, so deleted objects leave no stale
// series behind.
package conditiongauge

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

var statuses = []metav1.ConditionStatus{metav1.ConditionTrue, metav1.ConditionFalse, metav1.ConditionUnknown}

// Gauge is the condition gauge of one kind of object.
type Gauge struct {
	vec *prometheus.GaugeVec

	mu    sync.Mutex
	known map[[2]string][]string // namespace/name -> condition types set
}

// New returns a gauge named name with labels namespace, name, condition
// and status; register its Collector.
func New(name, help string) *Gauge {
	return &Gauge{
		vec: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "mcsd", Name: name, Help: help},
			[]string{"namespace", "name", "condition", "status"}),
		known: map[[2]string][]string{},
	}
}

// Collector is what to register.
func (g *Gauge) Collector() prometheus.Collector { return g.vec }

// Set records the current status of one condition of an object.
func (g *Gauge) Set(namespace, name string, c metav1.Condition) {
	for _, st := range statuses {
		v := 0.0
		if c.Status == st {
			v = 1
		}
		g.vec.WithLabelValues(namespace, name, c.Type, string(st)).Set(v)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	key := [2]string{namespace, name}
	for _, t := range g.known[key] {
		if t == c.Type {
			return
		}
	}
	g.known[key] = append(g.known[key], c.Type)
}

// Forget drops every series of an object that is gone.
func (g *Gauge) Forget(namespace, name string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	key := [2]string{namespace, name}
	for _, t := range g.known[key] {
		for _, st := range statuses {
			g.vec.DeleteLabelValues(namespace, name, t, string(st))
		}
	}
	delete(g.known, key)
}
