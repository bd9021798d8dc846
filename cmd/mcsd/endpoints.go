package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/apiserver/pkg/server/healthz"
	"k8s.io/klog/v2"
)

// serveEndpoints starts the /metrics (and /debug/pprof with --profiling) and the /healthz, /readyz and /livez
// servers; both stop when ctx ends. A port that cannot be bound is an error
// at once, naming the flag.
func serveEndpoints(ctx context.Context, o *options, reg *prometheus.Registry, dp *nodeAgent, ctrl *controllers) error {
	var health, readiness []healthz.HealthChecker
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
		if err := listenAndServe(ctx, "metrics-address", o.metricsAddress, mux); err != nil {
			return err
		}
	}
	if o.healthAddress != "" {
		if err := listenAndServe(ctx, "health-address", o.healthAddress, healthMux(health, readiness)); err != nil {
			return err
		}
	}
	return nil
}

// healthMux serves the checks as Kubernetes components do, with the API
// server's healthz handlers:
//
//   - /livez: the process serves HTTP (the check "ping"); the kubelet
//     restarts a pod that fails it.
//   - /healthz: the health checks, such as the proxier applying queued
//     updates in time.
//   - /readyz: the health checks and the readiness checks, such as the DNS
//     index and the proxier fed from synced informers.
//
// Each answers 200 "ok" or 500 naming the failed checks (their reasons go
// to the log at -v=2); ?verbose lists every check, ?exclude=NAME skips one,
// and /readyz/NAME (also /healthz/NAME) runs one check and says why it
// fails.
func healthMux(health, readiness []healthz.HealthChecker) *http.ServeMux {
	mux := http.NewServeMux()
	healthz.InstallLivezHandler(mux)
	healthz.InstallHandler(mux, health...)
	healthz.InstallReadyzHandler(mux, append(health[:len(health):len(health)], readiness...)...)
	return mux
}

func listenAndServe(ctx context.Context, flagName, addr string, h http.Handler) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("--%s: %w", flagName, err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		shutdownCtx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdownCtx)
	}()
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			klog.ErrorS(err, "HTTP server failed", "flag", flagName, "address", addr)
		}
	}()
	return nil
}
