package main

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"k8s.io/apiserver/pkg/server/healthz"
)

func TestHealthEndpoints(t *testing.T) {
	var proxierStuck, dnsUnsynced atomic.Bool
	check := func(name string, bad *atomic.Bool) healthz.HealthChecker {
		return healthz.NamedCheck(name, func(*http.Request) error {
			if bad.Load() {
				return errors.New(name + " is failing")
			}
			return nil
		})
	}
	srv := httptest.NewServer(healthMux(
		[]healthz.HealthChecker{check("proxier-sync", &proxierStuck)},
		[]healthz.HealthChecker{check("dns-synced", &dnsUnsynced)},
	))
	defer srv.Close()
	expect := func(t *testing.T, path string, code int, contains ...string) {
		t.Helper()
		got, body := httpGet(t, srv.URL+path)
		if got != code {
			t.Fatalf("GET %s: %d, want %d\n%s", path, got, code, body)
		}
		for _, want := range contains {
			if !strings.Contains(body, want) {
				t.Fatalf("GET %s does not say %q:\n%s", path, want, body)
			}
		}
	}

	t.Run("all three answer ok while every check passes", func(t *testing.T) {
		for _, path := range []string{"/livez", "/healthz", "/readyz"} {
			expect(t, path, http.StatusOK, "ok")
		}
		expect(t, "/readyz?verbose", http.StatusOK, "[+]proxier-sync ok", "[+]dns-synced ok", "readyz check passed")
		expect(t, "/livez?verbose", http.StatusOK, "[+]ping ok", "[+]proxier-sync ok")
	})
	t.Run("a replica whose DNS has not synced is alive and healthy but not ready", func(t *testing.T) {
		dnsUnsynced.Store(true)
		defer dnsUnsynced.Store(false)
		expect(t, "/livez", http.StatusOK)
		expect(t, "/healthz", http.StatusOK)
		expect(t, "/readyz", http.StatusInternalServerError, "[-]dns-synced failed", "[+]proxier-sync ok")
		expect(t, "/readyz/dns-synced", http.StatusInternalServerError, "dns-synced is failing")
		expect(t, "/readyz/proxier-sync", http.StatusOK)
		expect(t, "/readyz?exclude=dns-synced", http.StatusOK)
	})
	t.Run("a stuck proxier fails liveness, health and readiness", func(t *testing.T) {
		proxierStuck.Store(true)
		defer proxierStuck.Store(false)
		expect(t, "/livez", http.StatusInternalServerError, "[-]proxier-sync failed")
		expect(t, "/livez/proxier-sync", http.StatusInternalServerError, "proxier-sync is failing")
		expect(t, "/healthz", http.StatusInternalServerError, "[-]proxier-sync failed")
		expect(t, "/healthz/proxier-sync", http.StatusInternalServerError, "proxier-sync is failing")
		expect(t, "/readyz", http.StatusInternalServerError, "[-]proxier-sync failed")
		expect(t, "/livez/ping", http.StatusOK)
	})
	t.Run("a component that does not run has no check", func(t *testing.T) {
		expect(t, "/readyz/exporter-synced", http.StatusNotFound)
	})
}

// httpGet GETs url and returns the status and the body.
func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}
