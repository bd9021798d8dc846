// Package conditiongauge exports the conditions of mcsd's objects
// (ServiceExports, ServiceImports) as a Prometheus gauge that counts the
// objects in each (condition type, status, reason). It keeps no series per
// object: at ten thousand services a series per object, condition and
// status would be most of the process's metrics, and an operator asks "how
// many are not Ready, and why", which the counts answer; which ones, the
// API answers.
package conditiongauge

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Gauge is the condition gauge of one kind of object.
type Gauge struct {
	vec *prometheus.GaugeVec

	mu sync.Mutex
	// current holds what each object counts for: namespace/name ->
	// condition type -> status and reason.
	current map[[2]string]map[string]state
}

type state struct{ status, reason string }

// New returns a gauge named name with labels condition, status and reason;
// register its Collector.
func New(name, help string) *Gauge {
	return &Gauge{
		vec: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "mcsd", Name: name, Help: help},
			[]string{"condition", "status", "reason"}),
		current: map[[2]string]map[string]state{},
	}
}

// Collector is what to register.
func (g *Gauge) Collector() prometheus.Collector { return g.vec }

// Set records the current status and reason of one condition of an object.
func (g *Gauge) Set(namespace, name string, c metav1.Condition) {
	g.mu.Lock()
	defer g.mu.Unlock()
	key := [2]string{namespace, name}
	now := state{string(c.Status), c.Reason}
	conds := g.current[key]
	if conds == nil {
		conds = map[string]state{}
		g.current[key] = conds
	}
	if was, ok := conds[c.Type]; ok {
		if was == now {
			return
		}
		g.vec.WithLabelValues(c.Type, was.status, was.reason).Dec()
	}
	g.vec.WithLabelValues(c.Type, now.status, now.reason).Inc()
	conds[c.Type] = now
}

// Forget stops counting an object that is gone.
func (g *Gauge) Forget(namespace, name string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	key := [2]string{namespace, name}
	for t, was := range g.current[key] {
		g.vec.WithLabelValues(t, was.status, was.reason).Dec()
	}
	delete(g.current, key)
}
