package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/apiserver/pkg/server/healthz"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// serveEndpoints starts the /metrics (and /debug/pprof with --profiling) and the /healthz, /readyz and /livez
// (with /statusz and /proxyMode) servers; both stop when ctx ends. A port that cannot be bound is an error
// at once, naming the flag. With --metrics-secure, /metrics answers over HTTPS the requests that the local
// cluster's API server (kube) authenticates and authorizes.
func serveEndpoints(ctx context.Context, o *options, clusterID string, reg *prometheus.Registry, kube kubernetes.Interface, dp *nodeAgent, ctrl *controllers, d *drain) error {
	health, readiness := []healthz.HealthChecker{}, []healthz.HealthChecker{d.readyCheck()}
	if dp != nil {
		health = append(health, dp.healthChecks()...)
		readiness = append(readiness, dp.readyChecks()...)
	}
	if ctrl != nil {
		readiness = append(readiness, ctrl.readyChecks()...)
	}
	if o.metricsAddress != "" {
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
		if o.profiling {
			// As Kubernetes components do with --profiling: heap and CPU
			// profiles on the metrics address.
			mux.HandleFunc("/debug/pprof/", pprof.Index)
			mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
			mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
			mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
		}
		var h http.Handler = mux
		var tlsConfig *tls.Config
		if o.metricsSecure {
			host, _, _ := net.SplitHostPort(o.metricsAddress)
			var err error
			if tlsConfig, err = metricsTLS(o, host); err != nil {
				return err
			}
			h = newDelegatedAuth(kube, clock.RealClock{}, mux)
		}
		if err := listenAndServe(ctx, "metrics-address", o.metricsAddress, tlsConfig, h); err != nil {
			return err
		}
	}
	if o.healthAddress != "" {
		mux := healthMux(health, readiness)
		statusHandlers(mux, o, clusterID, dp, ctrl)
		if err := listenAndServe(ctx, "health-address", o.healthAddress, nil, mux); err != nil {
			return err
		}
	}
	return nil
}

// healthMux serves the checks as Kubernetes components do, with the API
// server's healthz handlers:
//
//   - /livez: the process serves HTTP (the check "ping") and the health
//     checks pass; the kubelet restarts a pod that fails it.
//   - /healthz: the health checks: the proxier applies queued updates in
//     time (kube-proxy's /healthz), the DNS server answers a query on its
//     own socket. A component stuck in either way is restarted.
//   - /readyz: the health checks and the readiness checks, such as the DNS
//     index and the proxier fed from synced informers: what is not synced
//     yet is not ready, and not restarted either.
//
// Each answers 200 "ok" or 500 naming the failed checks (their reasons go
// to the log at -v=2); ?verbose lists every check, ?exclude=NAME skips one,
// and /livez/NAME, /healthz/NAME and /readyz/NAME run one check and say why
// it fails.
func healthMux(health, readiness []healthz.HealthChecker) *http.ServeMux {
	mux := http.NewServeMux()
	healthz.InstallLivezHandler(mux, append([]healthz.HealthChecker{healthz.PingHealthz}, health...)...)
	healthz.InstallHandler(mux, health...)
	healthz.InstallReadyzHandler(mux, append(health[:len(health):len(health)], readiness...)...)
	return mux
}

// listenAndServe serves h on addr, over TLS when tlsConfig is not nil.
func listenAndServe(ctx context.Context, flagName, addr string, tlsConfig *tls.Config, h http.Handler) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("--%s: %w", flagName, err)
	}
	if tlsConfig != nil {
		ln = tls.NewListener(ln, tlsConfig)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, BaseContext: func(net.Listener) context.Context { return ctx }}
	go func() {
		<-ctx.Done()
		shutdownCtx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdownCtx)
	}()
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			klog.FromContext(ctx).Error(err, "HTTP server failed", "flag", flagName, "address", addr)
		}
	}()
	return nil
}

// readyChecks say whether every data-plane component this replica runs
// answers from synced state.
func (dp *nodeAgent) readyChecks() []healthz.HealthChecker {
	var checks []healthz.HealthChecker
	if dp.dnsServer != nil {
		checks = append(checks, healthz.NamedCheck("dns-synced", func(*http.Request) error {
			if !dp.dnsServer.Ready() {
				return errors.New("dns: not serving from a synced index yet")
			}
			return nil
		}))
	}
	if dp.provider != nil {
		checks = append(checks, healthz.NamedCheck("proxier-synced", func(*http.Request) error {
			if !dp.fed.Load() {
				return errors.New("proxier: informers not synced yet")
			}
			return nil
		}))
		// kubectl mcs diagnose reads this one through the API server's pod
		// proxy: the node holds mcsd's rules (the metrics, which say the
		// same, are on the node's loopback).
		checks = append(checks, healthz.NamedCheck("proxier-programmed", func(*http.Request) error {
			if _, last := dp.health.Healthy(); last.IsZero() {
				return errors.New("proxier: no rules committed to the node yet")
			}
			return nil
		}))
	}
	return checks
}

// healthChecks say whether the components this replica runs are stuck:
// the proxier leaving a queued update unapplied longer than
// --proxier-healthz-timeout (kube-proxy's semantic: a sync loop with no
// work to do is not judged), the DNS server answering no query.
func (dp *nodeAgent) healthChecks() []healthz.HealthChecker {
	var checks []healthz.HealthChecker
	if dp.health != nil {
		checks = append(checks, healthz.NamedCheck("proxier-sync", func(*http.Request) error {
			if ok, last := dp.health.Healthy(); !ok {
				return fmt.Errorf("proxier: a queued update is not applied (last sync %v)", last)
			}
			return nil
		}))
	}
	if dp.dnsCheck != nil {
		checks = append(checks, dp.dnsCheck)
	}
	return checks
}

// readyChecks say whether the controllers of this replica are synced; a
// replica that is not leading has nothing to be ready for.
func (c *controllers) readyChecks() []healthz.HealthChecker {
	var checks []healthz.HealthChecker
	if c.o.runs(componentExporter) {
		checks = append(checks, c.syncedCheck(componentExporter, func() bool { e := c.exporter.Load(); return e != nil && e.Synced() }))
	}
	if c.o.runs(componentImporter) {
		checks = append(checks, c.syncedCheck(componentImporter, func() bool { i := c.importer.Load(); return i != nil && i.Synced() }))
	}
	return checks
}

// syncedCheck is the readiness check "<name>-synced" of a controller.
func (c *controllers) syncedCheck(name string, synced func() bool) healthz.HealthChecker {
	return healthz.NamedCheck(name+"-synced", func(*http.Request) error {
		if c.leading.Load() && !synced() {
			return errors.New(name + ": caches not synced yet")
		}
		return nil
	})
}
