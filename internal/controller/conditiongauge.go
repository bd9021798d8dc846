// The condition gauge exports the conditions of mcsd's objects
// (ServiceExports, ServiceImports) as a Prometheus gauge that counts the
// objects in each (condition type, status, reason). It keeps no series per
// object: at ten thousand services a series per object, condition and
// status would be most of the process's metrics, and an operator asks "how
// many are not Ready, and why", which the counts answer; which ones, the
// API answers.

package controller

import (
	"slices"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// conditionGauge is the condition gauge of one kind of object.
type conditionGauge struct {
	vec *prometheus.GaugeVec

	mu sync.Mutex
	// current holds what each object counts for: namespace/name -> its
	// conditions' (type, status, reason), a handful at most, so a slice
	// rather than a map per object.
	current map[[2]string][]conditionState
}

type conditionState struct{ typ, status, reason string }

// newConditionGauge returns the gauge mcsd_<subsystem>_<name> with labels
// condition, status and reason; register its Collector.
func newConditionGauge(subsystem, name, help string) *conditionGauge {
	return &conditionGauge{
		vec: prometheus.NewGaugeVec(prometheus.GaugeOpts(MetricOpts(subsystem, name, help)),
			[]string{"condition", "status", "reason"}),
		current: map[[2]string][]conditionState{},
	}
}

// Collector is what to register.
func (g *conditionGauge) Collector() prometheus.Collector { return g.vec }

// Set records the current status and reason of one condition of an object.
func (g *conditionGauge) Set(namespace, name string, c metav1.Condition) {
	g.mu.Lock()
	defer g.mu.Unlock()
	key := [2]string{namespace, name}
	now := conditionState{c.Type, string(c.Status), c.Reason}
	conds := g.current[key]
	i := slices.IndexFunc(conds, func(s conditionState) bool { return s.typ == c.Type })
	if i >= 0 {
		if conds[i] == now {
			return
		}
		g.vec.WithLabelValues(c.Type, conds[i].status, conds[i].reason).Dec()
		conds[i] = now
	} else {
		g.current[key] = append(conds, now)
	}
	g.vec.WithLabelValues(c.Type, now.status, now.reason).Inc()
}

// Forget stops counting an object that is gone.
func (g *conditionGauge) Forget(namespace, name string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	key := [2]string{namespace, name}
	for _, was := range g.current[key] {
		g.vec.WithLabelValues(was.typ, was.status, was.reason).Dec()
	}
	delete(g.current, key)
}
