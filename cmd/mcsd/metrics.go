package main

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/mcsd-io/mcsd/internal/clientmetrics"
	"github.com/mcsd-io/mcsd/internal/version"
)

// newRegistry is the registry /metrics serves: the Go runtime and the
// process, mcsd_build_info, and client-go's workqueue, REST client and
// leader-election metrics (internal/clientmetrics). It hands client-go its
// metric providers, which client-go keeps for the whole process: call it
// once, before the first client, queue or leader elector is made.
func newRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), buildInfo(version.Get()))
	clientmetrics.New(reg).Install()
	return reg
}

// buildInfo is mcsd_build_info{version,revision,goversion} 1, as Prometheus
// exporters (and kubernetes_build_info) report their build.
func buildInfo(v version.Info) prometheus.Collector {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: "mcsd",
		Name:      "build_info",
		Help:      "The running mcsd's version (git describe), revision (commit) and Go version; always 1.",
		ConstLabels: prometheus.Labels{
			"version":   v.Version,
			"revision":  v.Revision,
			"goversion": v.GoVersion,
		},
	})
	g.Set(1)
	return g
}
