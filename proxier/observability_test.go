package proxier

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	v1 "k8s.io/api/core/v1"
	clocktesting "k8s.io/utils/clock/testing"
)

// metricsFixture is a fixture whose proxier registers its metrics.
func metricsFixture(t *testing.T, edit ...func(*Config)) (*fixture, *prometheus.Registry) {
	reg := prometheus.NewRegistry()
	f := newFixture(t, v1.IPv4Protocol, append([]func(*Config){func(c *Config) { c.Registerer = reg }}, edit...)...)
	return f, reg
}

// observations is how many times the IPv4 series of a histogram observed.
func observations(t *testing.T, reg *prometheus.Registry, name string) uint64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range families {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "ip_family" && l.GetValue() == string(v1.IPv4Protocol) {
					return m.GetHistogram().GetSampleCount()
				}
			}
		}
	}
	return 0
}

func TestMetrics(t *testing.T) {
	t.Run("full and partial syncs are timed in kube-proxy's three histograms", func(t *testing.T) {
		f, reg := metricsFixture(t)
		f.start(append(webSlices(), webImport())...)
		f.p.OnEndpointSliceUpdate(nil, newSlice("web", remoteCluster, []slicePort{tcp("http", 80, 8080), udp("dns", 53, 5353)}, ready("10.2.0.1")))
		f.sync()
		for name, want := range map[string]uint64{
			"mcsd_proxier_sync_proxy_rules_duration_seconds":         2,
			"mcsd_proxier_sync_full_proxy_rules_duration_seconds":    1,
			"mcsd_proxier_sync_partial_proxy_rules_duration_seconds": 1,
		} {
			if got := observations(t, reg, name); got != want {
				t.Errorf("%s observed %d syncs, want %d", name, got, want)
			}
		}
	})
	t.Run("network programming latency runs from the EndpointSlice change to the sync that applies it", func(t *testing.T) {
		f, _ := metricsFixture(t)
		f.start(append(webSlices(), webImport())...)
		s := newSlice("web", remoteCluster, []slicePort{tcp("http", 80, 8080), udp("dns", 53, 5353)}, ready("10.2.0.1"))
		s.Annotations[v1.EndpointsLastChangeTriggerTime] = f.clock.Now().Add(-3 * time.Second).Format(time.RFC3339Nano)
		f.p.OnEndpointSliceUpdate(nil, s)
		f.clock.Step(2 * time.Second)
		f.sync()
		var m dto.Metric
		if err := f.p.metrics.networkProgramming.WithLabelValues(string(v1.IPv4Protocol)).(prometheus.Histogram).Write(&m); err != nil {
			t.Fatal(err)
		}
		if got := m.GetHistogram().GetSampleSum(); got != 5 {
			t.Errorf("network programming latency %vs, want 5s (3s before the event, 2s until the sync)", got)
		}
	})
	t.Run("changes are counted while pending and in total", func(t *testing.T) {
		f, _ := metricsFixture(t)
		f.start(append(webSlices(), webImport())...)
		family := string(v1.IPv4Protocol)
		servicesBefore := testutil.ToFloat64(f.p.metrics.serviceChangesTotal.WithLabelValues(family))
		f.p.OnServiceImportUpdate(webImport(), webImport(withAffinity(30)))
		if got := testutil.ToFloat64(f.p.metrics.serviceChangesPending.WithLabelValues(family)); got != 1 {
			t.Errorf("pending service changes %v, want 1", got)
		}
		f.sync()
		if got := testutil.ToFloat64(f.p.metrics.serviceChangesPending.WithLabelValues(family)); got != 0 {
			t.Errorf("pending service changes after the sync %v, want 0", got)
		}
		if got := testutil.ToFloat64(f.p.metrics.serviceChangesTotal.WithLabelValues(family)) - servicesBefore; got != 1 {
			t.Errorf("service changes counted %v, want 1", got)
		}
	})
	t.Run("internalTrafficPolicy Local ports without local endpoints are counted", func(t *testing.T) {
		f, _ := metricsFixture(t)
		remote := newSlice("web", remoteCluster, []slicePort{tcp("http", 80, 8080), udp("dns", 53, 5353)}, ready("10.2.0.1"))
		f.start(webImport(withInternalTrafficPolicy(v1.ServiceInternalTrafficPolicyLocal)), remote)
		gauge := f.p.metrics.noLocalEndpoints.WithLabelValues("internal", string(v1.IPv4Protocol))
		if got := testutil.ToFloat64(gauge); got != 2 {
			t.Errorf("ports without local endpoints %v, want 2 (http and dns)", got)
		}
		f.p.OnEndpointSliceAdd(newSlice("web", localCluster, []slicePort{tcp("http", 80, 8080), udp("dns", 53, 5353)}, ready("10.1.0.1")))
		f.sync()
		if got := testutil.ToFloat64(gauge); got != 0 {
			t.Errorf("ports without local endpoints %v once there are some, want 0", got)
		}
	})
	t.Run("a failed transaction counts as a sync failure", func(t *testing.T) {
		f, _ := metricsFixture(t)
		f.start(append(webSlices(), webImport())...)
		f.setNFT(&failingNFT{Interface: f.nft, fail: true})
		f.p.OnServiceImportDelete(webImport())
		if err := f.p.syncRules(); err == nil {
			t.Fatal("sync succeeded")
		}
		if got := testutil.ToFloat64(f.p.metrics.syncFailures.WithLabelValues(string(v1.IPv4Protocol))); got != 1 {
			t.Errorf("sync failures %v, want 1", got)
		}
	})
}

func TestHealth(t *testing.T) {
	get := func(t *testing.T, h http.Handler) (int, map[string]any) {
		t.Helper()
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
		var body map[string]any
		if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
			t.Fatalf("body %q: %v", rec.Body.String(), err)
		}
		return rec.Code, body
	}
	t.Run("a queued update not applied within the timeout makes /healthz fail, applying it heals it", func(t *testing.T) {
		clk := clocktesting.NewFakeClock(epoch)
		h := NewHealth(time.Minute, clk)
		f := newFixture(t, v1.IPv4Protocol, func(c *Config) { c.Health = h; c.Clock = clk })
		f.start(append(webSlices(), webImport())...)
		if code, body := get(t, h); code != http.StatusOK || body["healthy"] != true || body["lastUpdated"] == "" {
			t.Errorf("after the first sync: %d %v", code, body)
		}
		f.p.OnServiceImportDelete(webImport()) // queues a sync that nobody runs
		clk.Step(59 * time.Second)
		if code, _ := get(t, h); code != http.StatusOK {
			t.Errorf("within the timeout: %d, want 200", code)
		}
		clk.Step(2 * time.Second)
		if code, body := get(t, h); code != http.StatusServiceUnavailable || body["healthy"] != false {
			t.Errorf("past the timeout: %d %v, want 503", code, body)
		}
		f.sync()
		if code, body := get(t, h); code != http.StatusOK || body["lastUpdated"] != clk.Now().UTC().Format(time.RFC3339Nano) {
			t.Errorf("after the sync: %d %v, want 200 updated now", code, body)
		}
	})
	t.Run("one family late is enough to fail", func(t *testing.T) {
		clk := clocktesting.NewFakeClock(epoch)
		h := NewHealth(time.Minute, clk)
		h.Updated(v1.IPv4Protocol)
		h.Updated(v1.IPv6Protocol)
		h.QueuedUpdate(v1.IPv6Protocol)
		clk.Step(2 * time.Minute)
		h.QueuedUpdate(v1.IPv4Protocol)
		h.Updated(v1.IPv4Protocol)
		if healthy, _ := h.Healthy(); healthy {
			t.Error("healthy while IPv6 has waited two minutes")
		}
	})
}
