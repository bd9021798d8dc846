package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/mcsd-io/mcsd/test/lib/fixture"
	"github.com/mcsd-io/mcsd/test/lib/harness"
	"github.com/mcsd-io/mcsd/test/lib/netns"
	"github.com/miekg/dns"
)

// stampedVersion is what the test stamps into the daemon it runs, as the
// Makefile does with git describe.
const stampedVersion = "v9.8.7-test"

// buildStamped builds the daemon with -ldflags -X as the Makefile and the
// Dockerfile do, and makes the fixture run it.
func buildStamped(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "mcsd")
	pkg := "github.com/mcsd-io/mcsd/internal/version"
	cmd := exec.Command("go", "build", "-ldflags", "-X "+pkg+".version="+stampedVersion+" -X "+pkg+".revision=0123abcd", "-o", bin, ".")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building mcsd: %v\n%s", err, out)
	}
	t.Setenv("MCSD_BINARY", bin)
	return bin
}

// A running daemon says which build it is, exposes what client-go does and
// serves the named health checks of the components it runs.
func TestRunningDaemon(t *testing.T) {
	if testing.Short() {
		t.Skip("runs API servers and a node network namespace")
	}
	bin := buildStamped(t)
	t.Run("--version prints the stamped version, the commit and the Go version", func(t *testing.T) {
		out, err := exec.Command(bin, "--version").CombinedOutput()
		if err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		for _, want := range []string{stampedVersion, "0123abcd", runtime.Version()} {
			if !strings.Contains(string(out), want) {
				t.Fatalf("--version printed %q, without %q", out, want)
			}
		}
	})

	t.Run("a metrics certificate that does not exist stops the daemon, naming the flag", func(t *testing.T) {
		out, err := exec.Command(bin, "--components=dns", "--dns-gate=node", "--metrics-tls-cert-file=/nonexistent/tls.crt", "--metrics-tls-private-key-file=/nonexistent/tls.key").CombinedOutput()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 2 || !strings.Contains(string(out), "--metrics-tls-cert-file: stat /nonexistent/tls.crt") {
			t.Fatalf("exit %v, want 2 naming --metrics-tls-cert-file:\n%s", err, out)
		}
	})

	cs := harness.Start(t, harness.Options{Clusters: 1})
	m := fixture.Join(t, cs)[0]
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	node, err := m.AddNode(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// /metrics as it ships: over HTTPS, to reviewed tokens.
	d := fixture.StartDaemon(t, cs, m, node, fixture.DaemonOptions{Args: []string{"--metrics-secure", "--shutdown-delay-duration=10s"}})
	metricsURL := "https://" + strings.TrimPrefix(d.Metrics, "http://")
	scraper := metricsReader(ctx, t, m.Kube, "scraper", true)

	// get reads url, with the bearer token if one is given; the metrics'
	// certificate is self-signed.
	tlsClient := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	getWith := func(ctx context.Context, url, token string) (int, string, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return 0, "", err
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := tlsClient.Do(req)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body), err
	}
	get := func(ctx context.Context, url string) (int, string, error) {
		if url == d.Metrics {
			return getWith(ctx, metricsURL, scraper)
		}
		return getWith(ctx, url, "")
	}

	t.Run("/metrics answers only the tokens the API server authenticates and authorizes", func(t *testing.T) {
		stranger := metricsReader(ctx, t, m.Kube, "stranger", false)
		for _, tc := range []struct {
			name, token string
			code        int
			says        string
		}{
			{"no token", "", http.StatusUnauthorized, "no bearer token"},
			{"a token the API server does not accept", "not-a-token", http.StatusUnauthorized, "does not accept the token"},
			{"a ServiceAccount without get on /metrics", stranger, http.StatusForbidden, `user "system:serviceaccount:default:stranger" cannot get the non-resource URL "/metrics"`},
			{"a ServiceAccount bound to the reader role", scraper, http.StatusOK, "mcsd_build_info{"},
		} {
			code, body, err := getWith(ctx, metricsURL, tc.token)
			if err != nil || code != tc.code || !strings.Contains(body, tc.says) {
				t.Errorf("%s: %d %v, want %d saying %q:\n%.300s", tc.name, code, err, tc.code, tc.says, body)
			}
		}
		if code, body, err := getWith(ctx, d.Metrics, scraper); err == nil && code == http.StatusOK {
			t.Errorf("plain HTTP to the secure /metrics: %d %.100s, want it refused", code, body)
		}
	})

	t.Run("/metrics has the build, client-go's queues and requests, and the leader", func(t *testing.T) {
		wantSamples := map[string]*regexp.Regexp{
			"build info": regexp.MustCompile(`(?m)^mcsd_build_info\{goversion="` + regexp.QuoteMeta(runtime.Version()) +
				`",revision="0123abcd",version="` + regexp.QuoteMeta(stampedVersion) + `"\} 1$`),
			"exporter queue adds":   regexp.MustCompile(`(?m)^workqueue_adds_total\{name="exporter"\} [0-9]`),
			"importer queue depth":  regexp.MustCompile(`(?m)^workqueue_depth\{name="importer"\} [0-9]`),
			"queue work durations":  regexp.MustCompile(`(?m)^workqueue_work_duration_seconds_count\{name="importer-clusters"\} [1-9]`),
			"API requests":          regexp.MustCompile(`(?m)^rest_client_requests_total\{code="200",host="[^"]+",method="GET"\} [1-9]`),
			"API request latencies": regexp.MustCompile(`(?m)^rest_client_request_duration_seconds_count\{host="[^"]+",verb="GET"\} [1-9]`),
			"leadership":            regexp.MustCompile(`(?m)^leader_election_master_status\{name="mcsd-controllers"\} 1$`),
		}
		var body string
		err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			code, b, err := get(ctx, d.Metrics)
			if err != nil || code != http.StatusOK {
				return false, nil
			}
			body = b
			for _, re := range wantSamples {
				if !re.MatchString(body) {
					return false, nil
				}
			}
			return true, nil
		})
		if err != nil {
			for what, re := range wantSamples {
				if !re.MatchString(body) {
					t.Errorf("no sample of %s (%s)", what, re)
				}
			}
			t.Fatalf("/metrics:\n%s", grepLines(body, "mcsd_build_info", "workqueue_", "rest_client_requests_total", "leader_election"))
		}
	})
	t.Run("/readyz names a check per running component, each reachable on its own", func(t *testing.T) {
		code, body, err := get(ctx, d.Health+"/readyz?verbose")
		if err != nil || code != http.StatusOK {
			t.Fatalf("/readyz?verbose: %d %v\n%s", code, err, body)
		}
		for _, check := range []string{"proxier-sync", "dns-answers", "dns-synced", "proxier-synced", "exporter-synced", "importer-synced"} {
			if !strings.Contains(body, "[+]"+check+" ok") {
				t.Errorf("/readyz?verbose does not pass %s:\n%s", check, body)
			}
			if code, body, err := get(ctx, d.Health+"/readyz/"+check); err != nil || code != http.StatusOK {
				t.Errorf("/readyz/%s: %d %v %s", check, code, err, body)
			}
		}
		// The DNS server is queried on its own socket, inside the node's
		// network namespace.
		for _, path := range []string{"/livez", "/livez/dns-answers", "/livez/proxier-sync", "/healthz/proxier-sync", "/healthz/dns-answers"} {
			if code, body, err := get(ctx, d.Health+path); err != nil || code != http.StatusOK {
				t.Errorf("%s: %d %v %s", path, code, err, body)
			}
		}
	})
	t.Run("the alert rules name series the daemon exports", func(t *testing.T) {
		rules, err := os.ReadFile("../../charts/mcsd/files/prometheus-rules.yaml")
		if err != nil {
			t.Fatal(err)
		}
		// Series a healthy daemon without exports has no sample of: vectors
		// get theirs with the first fault (or ServiceExport) they count.
		faultOnly := map[string]bool{
			"mcsd_exporter_serviceexports_by_condition":                     true,
			"mcsd_importer_records_over_cap":                                true,
			"mcsd_proxier_sync_proxy_rules_nftables_sync_failures_total":    true,
			"mcsd_proxier_sync_proxy_rules_iptables_restore_failures_total": true,
		}
		named := map[string]bool{}
		for _, name := range regexp.MustCompile(`\b(mcsd|leader_election)_[a-z_]+`).FindAllString(string(rules), -1) {
			if !faultOnly[name] {
				named[name] = true
			}
		}
		if len(named) < 5 {
			t.Fatalf("found only %v in the rules", named)
		}
		var missing []string
		err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			code, body, err := get(ctx, d.Metrics)
			if err != nil || code != http.StatusOK {
				return false, nil
			}
			missing = missing[:0]
			for name := range named {
				if !regexp.MustCompile(`(?m)^` + name + `[{ ]`).MatchString(body) {
					missing = append(missing, name)
				}
			}
			return len(missing) == 0, nil
		})
		if err != nil {
			t.Fatalf("/metrics has no sample of %v, which the alert rules name", missing)
		}
	})
	t.Run("/statusz says what the daemon runs with; /proxyMode the mode", func(t *testing.T) {
		var s status
		err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			code, body, err := get(ctx, d.Health+"/statusz")
			if err != nil || code != http.StatusOK {
				return false, nil
			}
			if err := json.Unmarshal([]byte(body), &s); err != nil {
				return false, fmt.Errorf("/statusz is not JSON: %w\n%s", err, body)
			}
			le := s.LeaderElection
			return le != nil && le.Leading && le.Leader != "" && le.BrokerRanges != "", nil
		})
		if err != nil {
			t.Fatalf("/statusz never said this replica leads: %v\n%+v", err, s)
		}
		if s.Version != stampedVersion || s.Revision != "0123abcd" || s.ClusterID != m.ID {
			t.Errorf("/statusz: version %q revision %q cluster %q, want %q 0123abcd %q", s.Version, s.Revision, s.ClusterID, stampedVersion, m.ID)
		}
		if s.ProxierMode != "nftables" || s.DNSGate != "cluster" || len(s.ClusterSetCIDRs) == 0 {
			t.Errorf("/statusz: proxier mode %q, DNS gate %q, clusterset CIDRs %v; want nftables, cluster and the ranges", s.ProxierMode, s.DNSGate, s.ClusterSetCIDRs)
		}
		le := s.LeaderElection
		if !le.Enabled || le.Leader != le.Identity || le.Lease != "mcsd-system/"+leaseName {
			t.Errorf("/statusz: leader election %+v, want this replica (its identity) holding mcsd-system/%s", le, leaseName)
		}
		code, body, err := get(ctx, d.Health+"/proxyMode")
		if err != nil || code != http.StatusOK || body != "nftables" {
			t.Errorf("/proxyMode: %d %v %q, want nftables", code, err, body)
		}
	})
	// waitEvent waits for an event of reason in namespace about the object
	// named name whose message contains text.
	waitEvent := func(t *testing.T, namespace, kind, name, reason, text string) corev1.Event {
		t.Helper()
		var found corev1.Event
		err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			events, err := m.Kube.CoreV1().Events(namespace).List(ctx, metav1.ListOptions{})
			if err != nil {
				return false, err
			}
			for _, e := range events.Items {
				if e.InvolvedObject.Kind == kind && e.InvolvedObject.Name == name && e.Reason == reason && strings.Contains(e.Message, text) {
					found = e
					return true, nil
				}
			}
			return false, nil
		})
		if err != nil {
			t.Fatalf("no %s event %q on %s %s/%s: %v", reason, text, kind, namespace, name, err)
		}
		return found
	}
	t.Run("the leader election records its events on the Lease", func(t *testing.T) {
		e := waitEvent(t, "mcsd-system", "Lease", leaseName, "LeaderElection", "became leader")
		if e.Source.Component != "mcsd" || e.Type != corev1.EventTypeNormal {
			t.Errorf("leader election event from %q of type %s, want mcsd, Normal", e.Source.Component, e.Type)
		}
	})
	t.Run("the node agent records its start on its Node, and a refused sync", func(t *testing.T) {
		e := waitEvent(t, metav1.NamespaceDefault, "Node", node.Name, EventNodeAgentStarting, "proxier in nftables mode")
		if e.Source.Component != "mcsd-node-agent" || e.Source.Host != node.Name {
			t.Errorf("start event from %+v, want mcsd-node-agent on %s", e.Source, node.Name)
		}
		// What the proxier tells its SyncFailed hook when nft refuses a
		// transaction (the proxier's tests show that it does), here
		// through the daemon's recorder to the real API server.
		events := newNodeEvents(m.Kube, node.Name)
		defer events.stop()
		events.syncFailed(corev1.IPv4Protocol, errors.New("nft: "+strings.Repeat("x", 2*maxEventMessage)))
		e = waitEvent(t, metav1.NamespaceDefault, "Node", node.Name, EventSyncProxyRulesFailed, "IPv4 ClusterSetIP rules not synced: nft: xxx")
		if e.Type != corev1.EventTypeWarning || len(e.Message) > maxEventMessage {
			t.Errorf("sync failure event of type %s with a %d-byte message, want Warning, at most %d", e.Type, len(e.Message), maxEventMessage)
		}
	})
	// Last: it stops the daemon.
	t.Run("at SIGTERM, /readyz fails while DNS answers on for --shutdown-delay-duration, then the daemon exits", func(t *testing.T) {
		terminated := make(chan error, 1)
		go func() { terminated <- d.Terminate(time.Minute) }()
		var code int
		var body string
		err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			var getErr error
			code, body, getErr = get(ctx, d.Health+"/readyz/shutdown")
			return getErr == nil && code == http.StatusInternalServerError, nil
		})
		if err != nil {
			t.Fatalf("/readyz/shutdown after SIGTERM: %d %q, want 500: %v", code, body, err)
		}
		answer, err := exchange(ctx, netns.Path(node.NS.Name), "udp", d.DNS.String(), soaQuery("clusterset.local"))
		if err != nil || answer.Rcode != dns.RcodeSuccess || len(answer.Answer) != 1 {
			t.Errorf("the SOA of clusterset.local once not ready: %v %v, want it answered", answer, err)
		}
		select {
		case err := <-terminated:
			t.Fatalf("the daemon exited before the delay was over (%v)", err)
		default:
		}
		if err := <-terminated; err != nil {
			t.Fatalf("after the delay: %v\n%s", err, d.Tail(20))
		}
		if !strings.Contains(d.Tail(200), "Shutting down: not ready, serving on until the delay is over") {
			t.Errorf("no log of the delay:\n%s", d.Tail(20))
		}
	})
}

// metricsReader makes a ServiceAccount name in default, bound to a
// ClusterRole granting get on /metrics when granted (the chart's
// mcsd-metrics-reader, whose rule charts/render_test.go checks), and
// returns a token of it.
func metricsReader(ctx context.Context, t *testing.T, kube kubernetes.Interface, name string, granted bool) string {
	t.Helper()
	sa, err := kube.CoreV1().ServiceAccounts(metav1.NamespaceDefault).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if granted {
		role := &rbacv1.ClusterRole{
			ObjectMeta: metav1.ObjectMeta{Name: "mcsd-metrics-reader"},
			Rules:      []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}},
		}
		if _, err := kube.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		binding := &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "mcsd-metrics-reader-" + name},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: sa.Namespace, Name: sa.Name}},
		}
		if _, err := kube.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	tok, err := kube.CoreV1().ServiceAccounts(sa.Namespace).CreateToken(ctx, sa.Name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tok.Status.Token
}

// grepLines are the lines of text that start with one of prefixes.
func grepLines(text string, prefixes ...string) string {
	var out strings.Builder
	for _, line := range strings.Split(text, "\n") {
		for _, p := range prefixes {
			if strings.HasPrefix(line, p) {
				fmt.Fprintln(&out, line)
				break
			}
		}
	}
	return out.String()
}
