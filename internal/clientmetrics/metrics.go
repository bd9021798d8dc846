// Package clientmetrics reports what client-go does inside mcsd to a
// Prometheus registry, under the names and labels Kubernetes components
// use, so that their dashboards and alerts work on mcsd too:
//
//   - workqueues: workqueue_depth, workqueue_adds_total,
//     workqueue_queue_duration_seconds, workqueue_work_duration_seconds,
//     workqueue_unfinished_work_seconds,
//     workqueue_longest_running_processor_seconds and workqueue_retries_total,
//     each by the queue's name;
//   - API requests: rest_client_requests_total{code,method,host},
//     rest_client_request_duration_seconds{verb,host},
//     rest_client_rate_limiter_duration_seconds{verb,host} (time spent
//     waiting on --kube-api-qps) and rest_client_request_retries_total;
//   - leader election: leader_election_master_status{name} (1 while this
//     process holds the lease) and leader_election_slowpath_total{name}.
//
// It only adapts client-go's metric interfaces to Prometheus; it must not
// know mcsd's controllers or queues.
package clientmetrics

import (
	"context"
	"net/url"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/tools/leaderelection"
	clientgometrics "k8s.io/client-go/tools/metrics"
	"k8s.io/client-go/util/workqueue"
)

// Metrics are the collectors of client-go's workqueue, REST client and
// leader-election metrics.
type Metrics struct {
	depth, unfinished, longestRunning *prometheus.GaugeVec
	adds, retries                     *prometheus.CounterVec
	queueDuration, workDuration       *prometheus.HistogramVec

	requestDuration, rateLimiterDuration *prometheus.HistogramVec
	requests, requestRetries             *prometheus.CounterVec

	leaderStatus *prometheus.GaugeVec
	slowpath     *prometheus.CounterVec
}

// New registers the collectors with reg. Nothing reports to them until
// Install, or until the providers are handed to client-go by other means.
func New(reg prometheus.Registerer) *Metrics {
	// Buckets as in k8s.io/component-base/metrics/prometheus: queue times
	// from 10ns to 10s, request times from 5ms to a minute.
	queueBuckets := prometheus.ExponentialBuckets(10e-9, 10, 10)
	requestBuckets := []float64{0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0}
	m := &Metrics{
		depth: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Subsystem: "workqueue", Name: "depth", Help: "Current depth of the workqueue.",
		}, []string{"name"}),
		adds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Subsystem: "workqueue", Name: "adds_total", Help: "Total number of adds handled by the workqueue.",
		}, []string{"name"}),
		queueDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Subsystem: "workqueue", Name: "queue_duration_seconds", Help: "How long in seconds an item stays in the workqueue before being requested.",
			Buckets: queueBuckets,
		}, []string{"name"}),
		workDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Subsystem: "workqueue", Name: "work_duration_seconds", Help: "How long in seconds processing an item from the workqueue takes.",
			Buckets: queueBuckets,
		}, []string{"name"}),
		unfinished: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Subsystem: "workqueue", Name: "unfinished_work_seconds",
			Help: "How many seconds of work has been done that is in progress and hasn't been observed by work_duration. Large values indicate stuck threads.",
		}, []string{"name"}),
		longestRunning: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Subsystem: "workqueue", Name: "longest_running_processor_seconds",
			Help: "How many seconds has the longest running processor for the workqueue been running.",
		}, []string{"name"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Subsystem: "workqueue", Name: "retries_total", Help: "Total number of retries handled by the workqueue.",
		}, []string{"name"}),

		requestDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Subsystem: "rest_client", Name: "request_duration_seconds", Help: "Request latency in seconds, by verb and host.",
			Buckets: requestBuckets,
		}, []string{"verb", "host"}),
		rateLimiterDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Subsystem: "rest_client", Name: "rate_limiter_duration_seconds", Help: "Client-side rate limiter latency in seconds, by verb and host.",
			Buckets: requestBuckets,
		}, []string{"verb", "host"}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Subsystem: "rest_client", Name: "requests_total", Help: "Number of HTTP requests, by status code, method and host.",
		}, []string{"code", "method", "host"}),
		requestRetries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Subsystem: "rest_client", Name: "request_retries_total", Help: "Number of request retries, by status code, method and host.",
		}, []string{"code", "verb", "host"}),

		leaderStatus: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Subsystem: "leader_election", Name: "master_status",
			Help: "Whether this process holds the leader-election lease name (1) or not (0).",
		}, []string{"name"}),
		slowpath: prometheus.NewCounterVec(prometheus.CounterOpts{
			Subsystem: "leader_election", Name: "slowpath_total",
			Help: "Number of times the leader-election lease was renewed through the slow path (a full read before the write).",
		}, []string{"name"}),
	}
	reg.MustRegister(m.depth, m.adds, m.queueDuration, m.workDuration, m.unfinished, m.longestRunning, m.retries,
		m.requestDuration, m.rateLimiterDuration, m.requests, m.requestRetries,
		m.leaderStatus, m.slowpath)
	return m
}

// Install makes client-go report to m. client-go holds one provider of each
// kind per process and keeps the first it is given: call Install once, at
// start, before the first workqueue or leader elector is made (those made
// before report nothing).
func (m *Metrics) Install() {
	workqueue.SetProvider(m.Workqueue())
	leaderelection.SetProvider(m.LeaderElection())
	clientgometrics.Register(m.RESTClient())
}

// Workqueue is the provider of workqueue metrics; a queue reports under its
// Name (an unnamed queue reports nothing).
func (m *Metrics) Workqueue() workqueue.MetricsProvider { return queueProvider{m} }

// LeaderElection is the provider of leader-election metrics.
func (m *Metrics) LeaderElection() leaderelection.MetricsProvider { return leaderProvider{m} }

// RESTClient is what client-go's REST clients report to.
func (m *Metrics) RESTClient() clientgometrics.RegisterOpts {
	return clientgometrics.RegisterOpts{
		RequestLatency:     latency{m.requestDuration},
		RateLimiterLatency: latency{m.rateLimiterDuration},
		RequestResult:      result{m.requests},
		RequestRetry:       retry{m.requestRetries},
	}
}

type queueProvider struct{ m *Metrics }

func (p queueProvider) NewDepthMetric(name string) workqueue.GaugeMetric {
	return p.m.depth.WithLabelValues(name)
}

func (p queueProvider) NewAddsMetric(name string) workqueue.CounterMetric {
	return p.m.adds.WithLabelValues(name)
}

func (p queueProvider) NewLatencyMetric(name string) workqueue.HistogramMetric {
	return p.m.queueDuration.WithLabelValues(name)
}

func (p queueProvider) NewWorkDurationMetric(name string) workqueue.HistogramMetric {
	return p.m.workDuration.WithLabelValues(name)
}

func (p queueProvider) NewUnfinishedWorkSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return p.m.unfinished.WithLabelValues(name)
}

func (p queueProvider) NewLongestRunningProcessorSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return p.m.longestRunning.WithLabelValues(name)
}

func (p queueProvider) NewRetriesMetric(name string) workqueue.CounterMetric {
	return p.m.retries.WithLabelValues(name)
}

type leaderProvider struct{ m *Metrics }

func (p leaderProvider) NewLeaderMetric() leaderelection.LeaderMetric { return leader(p) }

type leader struct{ m *Metrics }

func (l leader) On(name string)                { l.m.leaderStatus.WithLabelValues(name).Set(1) }
func (l leader) Off(name string)               { l.m.leaderStatus.WithLabelValues(name).Set(0) }
func (l leader) SlowpathExercised(name string) { l.m.slowpath.WithLabelValues(name).Inc() }

type latency struct{ h *prometheus.HistogramVec }

func (l latency) Observe(_ context.Context, verb string, u url.URL, d time.Duration) {
	l.h.WithLabelValues(verb, u.Host).Observe(d.Seconds())
}

type result struct{ c *prometheus.CounterVec }

func (r result) Increment(_ context.Context, code, method, host string) {
	r.c.WithLabelValues(code, method, host).Inc()
}

type retry struct{ c *prometheus.CounterVec }

func (r retry) IncrementRetry(_ context.Context, code, method, host string) {
	r.c.WithLabelValues(code, method, host).Inc()
}
