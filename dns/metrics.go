package dns

import (
	"fmt"
	"strconv"
	"sync/atomic"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"
)

// metrics of a Server. They are registered on the Registerer of its Config,
// never on a global one.
type metrics struct {
	queries *prometheus.CounterVec
	// counters are the series of queries, resolved once each: by qtype
	// label and rcode (the last one: any other rcode).
	counters  [len(qtypeLabels)][rcodeSlots]atomic.Pointer[prometheus.Counter]
	sampled   atomic.Uint32
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
			Help: "Time from a received DNS query to its answer being written, of one query in " + strconv.Itoa(durationSampling) + ".",
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

// durationSampling: one query in durationSampling is timed for the
// latency histogram, so that answering costs no clock reads.
const durationSampling = 64

// sample says whether to time this query (the full path's count; each UDP
// reader keeps its own).
func (m *metrics) sample() bool { return m.sampled.Add(1)%durationSampling == 0 }

// qtypeLabels bound the qtype label to the types this server answers
// (qtypeCodes, in the same order), then "other", then "none" for a query
// without a question.
var (
	qtypeCodes  = [...]int{int(dns.TypeA), int(dns.TypeAAAA), int(dns.TypeSRV), int(dns.TypePTR), int(dns.TypeTXT), int(dns.TypeSOA), int(dns.TypeNS), int(dns.TypeANY)}
	qtypeLabels = [...]string{"A", "AAAA", "SRV", "PTR", "TXT", "SOA", "NS", "ANY", "other", "none"}
)

// qtypeIndex is the position of the label of qtype t (-1: no question).
func qtypeIndex(t int) int {
	if t < 0 {
		return len(qtypeLabels) - 1
	}
	for i, c := range qtypeCodes {
		if c == t {
			return i
		}
	}
	return len(qtypeCodes)
}

// rcodeSlots: rcodes 0-23 have a series each, the rest share "other".
const rcodeSlots = 25

func rcodeLabel(rcode int) string {
	if s, ok := dns.RcodeToString[rcode]; ok {
		return s
	}
	return "other"
}

// count counts a query of type t (-1: no question) answered with rcode.
// After the first query of a kind it neither allocates nor looks up a
// series.
func (m *metrics) count(t, rcode int) {
	r := rcode
	if r < 0 || r >= rcodeSlots-1 {
		r = rcodeSlots - 1
	}
	qi := qtypeIndex(t)
	p := &m.counters[qi][r]
	c := p.Load()
	if c == nil {
		label := "other"
		if r < rcodeSlots-1 {
			label = rcodeLabel(rcode)
		}
		counter := m.queries.WithLabelValues(qtypeLabels[qi], label)
		c = &counter
		p.Store(c)
	}
	(*c).Inc()
}
