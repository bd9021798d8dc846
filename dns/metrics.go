package dns

import (
	"fmt"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"
)

// metrics of a Server. They are registered on the Registerer of its Config,
// never on a global one.
type metrics struct {
	queries   *prometheus.CounterVec
	duration  prometheus.Histogram
	malformed prometheus.Counter
	panics    prometheus.Counter
}

func newMetrics(reg prometheus.Registerer, index *Index) (*metrics, error) {
	m := &metrics{
		queries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mcsd_dns_queries_total",
			Help: "DNS queries answered, by query type and response code.",
		}, []string{"qtype", "rcode"}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "mcsd_dns_request_duration_seconds",
			Help: "Time from a parsed DNS query to its answer being written.",
			// 10µs to ~80ms.
			Buckets: prometheus.ExponentialBuckets(10e-6, 2, 14),
		}),
		malformed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "mcsd_dns_malformed_queries_total",
			Help: "DNS messages that could not be parsed (answered FORMERR when the header could be read).",
		}),
		panics: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "mcsd_dns_panics_total",
			Help: "DNS queries whose handling panicked (answered SERVFAIL).",
		}),
	}
	if reg == nil {
		return m, nil
	}
	collectors := []prometheus.Collector{
		m.queries, m.duration, m.malformed, m.panics,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "mcsd_dns_index_services",
			Help: "ServiceImports held by the DNS index.",
		}, func() float64 { s, _ := index.Size(); return float64(s) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "mcsd_dns_index_endpoints",
			Help: "Ready endpoint addresses held by the DNS index.",
		}, func() float64 { _, e := index.Size(); return float64(e) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "mcsd_dns_index_synced",
			Help: "1 once the DNS index holds the informers' initial lists, else 0 (queries get SERVFAIL).",
		}, func() float64 {
			if index.Synced() {
				return 1
			}
			return 0
		}),
	}
	for _, c := range collectors {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("dns: registering metrics: %w", err)
		}
	}
	return m, nil
}

// qtypeLabel bounds the qtype label to the types this server answers.
func qtypeLabel(t uint16) string {
	switch t {
	case dns.TypeA, dns.TypeAAAA, dns.TypeSRV, dns.TypePTR, dns.TypeTXT, dns.TypeSOA, dns.TypeNS, dns.TypeANY:
		return dns.TypeToString[t]
	}
	return "other"
}

func rcodeLabel(rcode int) string {
	if s, ok := dns.RcodeToString[rcode]; ok {
		return s
	}
	return "other"
}
