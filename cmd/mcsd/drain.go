package main

import (
	"context"
	"errors"
	"net/http"
	"os"
	"sync/atomic"
	"time"

	"k8s.io/apiserver/pkg/server/healthz"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// drain is how a replica stops: at the first signal it stops being ready
// and keeps serving for --shutdown-delay-duration; only then are its
// components stopped (a second signal stops them at once).
//
// A node agent's DNS endpoint serves flows that kube-proxy pins to it: the
// conntrack entry of CoreDNS's pooled UDP socket to mcsd-dns stays on this
// endpoint for as long as the EndpointSlice says it is serving, and only a
// failed readiness probe says otherwise. A server that stopped at SIGTERM,
// or after a preStop sleep while still ready, fails the queries on those
// flows until every kube-proxy has dropped them.
type drain struct {
	draining atomic.Bool
}

// start returns a context that ends delay after the first of signals, or
// at once on the second, and the drain whose readiness check fails from
// the first.
func startDrain(parent context.Context, clk clock.Clock, delay time.Duration, signals <-chan os.Signal) (context.Context, *drain) {
	ctx, cancel := context.WithCancel(parent)
	d := &drain{}
	go func() {
		defer cancel()
		var sig os.Signal
		select {
		case sig = <-signals:
		case <-ctx.Done():
			return
		}
		d.draining.Store(true)
		if delay <= 0 {
			return
		}
		logger := klog.FromContext(parent)
		logger.Info("Shutting down: not ready, serving on until the delay is over", "signal", sig.String(), "delay", delay)
		select {
		case <-clk.After(delay):
		case sig = <-signals:
			logger.Info("Shutting down at once", "signal", sig.String())
		case <-ctx.Done():
		}
	}()
	return ctx, d
}

// readyCheck is the readiness check "shutdown".
func (d *drain) readyCheck() healthz.HealthChecker {
	return healthz.NamedCheck("shutdown", func(*http.Request) error {
		if d.draining.Load() {
			return errors.New("shutting down: serving until --shutdown-delay-duration is over")
		}
		return nil
	})
}
