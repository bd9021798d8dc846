package main

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/mcsd-io/mcsd/dns"
	"github.com/mcsd-io/mcsd/proxier"
)

// livez serves a node agent's health endpoints and answers GET /livez:
// the status and the body of ?verbose.
func livez(t *testing.T, dp *nodeAgent) (int, string) {
	t.Helper()
	srv := httptest.NewServer(healthMux(dp.healthChecks(), dp.readyChecks()))
	defer srv.Close()
	return httpGet(t, srv.URL+"/livez?verbose")
}

// The proxier is live while it applies what it queued within the timeout
// (--proxier-healthz-timeout), and while it has nothing queued however
// long ago it last synced; an update left unapplied longer fails /livez.
func TestLivezFailsWhenTheProxierIsStuck(t *testing.T) {
	clock := clocktesting.NewFakePassiveClock(time.Now())
	h := proxier.NewHealth(time.Minute, clock)
	dp := &nodeAgent{health: h}
	h.Updated(corev1.IPv4Protocol)

	clock.SetTime(clock.Now().Add(time.Hour))
	if code, body := livez(t, dp); code != http.StatusOK || !strings.Contains(body, "[+]proxier-sync ok") {
		t.Fatalf("an idle proxier, an hour after its last sync: /livez %d\n%s", code, body)
	}
	h.QueuedUpdate(corev1.IPv4Protocol)
	clock.SetTime(clock.Now().Add(59 * time.Second))
	if code, body := livez(t, dp); code != http.StatusOK {
		t.Fatalf("an update queued 59s ago with a 1m timeout: /livez %d\n%s", code, body)
	}
	clock.SetTime(clock.Now().Add(2 * time.Second))
	if code, body := livez(t, dp); code != http.StatusInternalServerError || !strings.Contains(body, "[-]proxier-sync failed") {
		t.Fatalf("an update queued 61s ago with a 1m timeout: /livez %d, want 500 naming proxier-sync\n%s", code, body)
	}
	h.Updated(corev1.IPv4Protocol)
	if code, body := livez(t, dp); code != http.StatusOK {
		t.Fatalf("the update applied: /livez %d\n%s", code, body)
	}
}

// The DNS server is live while it answers a query on its own socket,
// SERVFAIL included (its index not synced yet); a socket nobody reads, a
// server that stopped and one that never started fail /livez.
func TestLivezFailsWhenTheDNSServerIsStuck(t *testing.T) {
	check := newDNSAnswers("", dns.DefaultZone)
	dp := &nodeAgent{dnsCheck: check}
	expect := func(t *testing.T, what string, code int, says string) {
		t.Helper()
		got, body := livez(t, dp)
		if got != code || !strings.Contains(body, says) {
			t.Fatalf("%s: /livez %d, want %d saying %q\n%s", what, got, code, says, body)
		}
	}

	expect(t, "before the server listens", http.StatusInternalServerError, "[-]dns-answers failed")

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv, err := dns.New(dns.Config{Index: dns.NewIndex(klog.Background()), Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, pc, ln) }()
	check.serving(pc.LocalAddr())
	expect(t, "a serving server whose index has not synced", http.StatusOK, "[+]dns-answers ok")

	cancel()
	if err := <-served; err != nil {
		t.Fatal(err)
	}
	expect(t, "the server stopped", http.StatusInternalServerError, "[-]dns-answers failed")

	// Bound, so the queries are queued, but never read: the state of a
	// server whose readers are blocked.
	stuck, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer stuck.Close()
	check.serving(stuck.LocalAddr())
	expect(t, "a socket nobody reads", http.StatusInternalServerError, "[-]dns-answers failed")
	if err := check.Check(nil); err == nil || !strings.Contains(err.Error(), stuck.LocalAddr().String()) {
		t.Errorf("the failed check says %v, want the socket's address", err)
	}
}

// A server bound to the unspecified address is queried on loopback.
func TestSelfAddress(t *testing.T) {
	for addr, want := range map[string]string{
		"0.0.0.0:53":   "127.0.0.1:53",
		"[::]:10271":   "[::1]:10271",
		"10.0.0.7:53":  "10.0.0.7:53",
		"[fd00::1]:53": "[fd00::1]:53",
	} {
		a, err := net.ResolveUDPAddr("udp", addr)
		if err != nil {
			t.Fatal(err)
		}
		if got := selfAddress(a); got != want {
			t.Errorf("selfAddress(%s) = %s, want %s", addr, got, want)
		}
	}
}
