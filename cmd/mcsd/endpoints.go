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
	"k8s.io/klog/v2"
)

// check is one named readiness or health check.
type check func() (bool, string)

// serveEndpoints starts the /metrics (and /debug/pprof with --profiling) and the /healthz, /readyz and /livez
// servers; both stop when ctx ends. A port that cannot be bound is an error
// at once, naming the flag.
func serveEndpoints(ctx context.Context, o *options, reg *prometheus.Registry, dp *dataPlane, ctrl *controllers) error {
	var readiness, health []check
	if dp != nil {
		readiness = append(readiness, dp.ready)
		health = append(health, dp.healthy)
	}
	if ctrl != nil {
		readiness = append(readiness, ctrl.ready)
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
		mux := http.NewServeMux()
		mux.Handle("/livez", checksHandler(nil))
		mux.Handle("/healthz", checksHandler(health))
		mux.Handle("/readyz", checksHandler(append(health, readiness...)))
		if err := listenAndServe(ctx, "health-address", o.healthAddress, mux); err != nil {
			return err
		}
	}
	return nil
}

func checksHandler(checks []check) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		for _, c := range checks {
			if ok, why := c(); !ok {
				http.Error(w, why, http.StatusServiceUnavailable)
				return
			}
		}
		fmt.Fprintln(w, "ok")
	})
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
