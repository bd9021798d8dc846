package proxier

import (
	"encoding/json"
	"net/http"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/utils/clock"
)

// HealthRecorder is told when the proxier queues an update of its rules and
// when it has applied them. An embedder passes one in [Config] to report the
// proxier's health with its own; [Health] is a ready-made one.
type HealthRecorder interface {
	// QueuedUpdate is called when a change is queued for the next sync.
	QueuedUpdate(family v1.IPFamily)
	// Updated is called when a sync has applied the changes queued before it.
	Updated(family v1.IPFamily)
}

// Health is a [HealthRecorder] that serves a health check: it is unhealthy
// when an update was queued more than its timeout ago and has still not been
// applied, which is what happens when nftables refuses the proxier's
// transactions or the sync loop is stuck.
type Health struct {
	clock   clock.PassiveClock
	timeout time.Duration

	mu sync.Mutex
	// oldestQueued is, per family, the first update queued since the last
	// applied one; zero when there is none.
	oldestQueued map[v1.IPFamily]time.Time
	lastUpdated  map[v1.IPFamily]time.Time
}

var _ HealthRecorder = (*Health)(nil)

// NewHealth returns a Health that fails when a queued update waits longer
// than timeout (kube-proxy uses twice its sync period). A nil clock means the
// real one.
func NewHealth(timeout time.Duration, clk clock.PassiveClock) *Health {
	if clk == nil {
		clk = clock.RealClock{}
	}
	return &Health{
		clock:        clk,
		timeout:      timeout,
		oldestQueued: map[v1.IPFamily]time.Time{},
		lastUpdated:  map[v1.IPFamily]time.Time{},
	}
}

// QueuedUpdate implements [HealthRecorder].
func (h *Health) QueuedUpdate(family v1.IPFamily) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.oldestQueued[family].IsZero() {
		h.oldestQueued[family] = h.clock.Now()
	}
}

// Updated implements [HealthRecorder].
func (h *Health) Updated(family v1.IPFamily) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.oldestQueued[family] = time.Time{}
	h.lastUpdated[family] = h.clock.Now()
}

// Healthy reports whether every family applied its queued updates in time,
// and when the rules were last updated (the oldest of the families' times).
func (h *Health) Healthy() (bool, time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := h.clock.Now()
	healthy := true
	for _, queued := range h.oldestQueued {
		if !queued.IsZero() && now.Sub(queued) > h.timeout {
			healthy = false
		}
	}
	var last time.Time
	for _, t := range h.lastUpdated {
		if last.IsZero() || t.Before(last) {
			last = t
		}
	}
	return healthy, last
}

// ServeHTTP answers 200 when healthy and 503 otherwise, with a small JSON
// body like kube-proxy's /healthz.
func (h *Health) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	healthy, last := h.Healthy()
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	if !healthy {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	body := struct {
		LastUpdated string `json:"lastUpdated"`
		CurrentTime string `json:"currentTime"`
		Healthy     bool   `json:"healthy"`
	}{CurrentTime: h.clock.Now().UTC().Format(time.RFC3339Nano), Healthy: healthy}
	if !last.IsZero() {
		body.LastUpdated = last.UTC().Format(time.RFC3339Nano)
	}
	_ = json.NewEncoder(w).Encode(body)
}
