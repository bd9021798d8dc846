package clientmetrics

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/workqueue"
)

// One Install per process, as in the daemon: client-go keeps the first
// provider it is given.
func TestInstalledMetricsReportWhatClientGoDoes(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := New(reg)
	m.Install()

	t.Run("a named workqueue reports adds, depth and retries under its name", func(t *testing.T) {
		q := workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "test-queue"})
		defer q.ShutDown()
		q.Add("a")
		q.Add("b")
		if got := testutil.ToFloat64(m.depth.WithLabelValues("test-queue")); got != 2 {
			t.Fatalf("depth %v, want 2", got)
		}
		key, _ := q.Get()
		q.AddRateLimited(key)
		q.Done(key)
		if got := testutil.ToFloat64(m.adds.WithLabelValues("test-queue")); got != 2 {
			t.Fatalf("adds %v, want 2", got)
		}
		if got := testutil.ToFloat64(m.retries.WithLabelValues("test-queue")); got != 1 {
			t.Fatalf("retries %v, want 1", got)
		}
		if n := testutil.CollectAndCount(m.queueDuration); n != 1 {
			t.Fatalf("%d queue-duration series, want 1", n)
		}
	})
	t.Run("an API request is counted by code, method and host and timed", func(t *testing.T) {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"kind":"Namespace","apiVersion":"v1","metadata":{"name":"default"}}`))
		}))
		defer srv.Close()
		client := kubernetes.NewForConfigOrDie(&rest.Config{Host: srv.URL})
		if _, err := client.CoreV1().Namespaces().Get(context.Background(), "default", metav1.GetOptions{}); err != nil {
			t.Fatal(err)
		}
		host := srv.Listener.Addr().String()
		if got := testutil.ToFloat64(m.requests.WithLabelValues("200", "GET", host)); got != 1 {
			t.Fatalf("rest_client_requests_total{code=200,method=GET,host=%s} = %v, want 1", host, got)
		}
		if n := testutil.CollectAndCount(m.requestDuration); n != 1 {
			t.Fatalf("%d request-duration series, want 1", n)
		}
	})
	t.Run("leadership sets the status gauge of its lease and losing it clears it", func(t *testing.T) {
		l := m.LeaderElection().NewLeaderMetric()
		l.On("mcsd-controllers")
		if got := testutil.ToFloat64(m.leaderStatus.WithLabelValues("mcsd-controllers")); got != 1 {
			t.Fatalf("status %v while leading, want 1", got)
		}
		l.Off("mcsd-controllers")
		if got := testutil.ToFloat64(m.leaderStatus.WithLabelValues("mcsd-controllers")); got != 0 {
			t.Fatalf("status %v after leading, want 0", got)
		}
	})
	t.Run("every family has the name Kubernetes components give it", func(t *testing.T) {
		families, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]bool{}
		for _, f := range families {
			got[f.GetName()] = true
		}
		for _, name := range []string{"workqueue_depth", "workqueue_adds_total", "workqueue_queue_duration_seconds", "workqueue_retries_total",
			"rest_client_requests_total", "rest_client_request_duration_seconds", "rest_client_rate_limiter_duration_seconds",
			"leader_election_master_status"} {
			if !got[name] {
				t.Errorf("no %s in %v", name, got)
			}
		}
	})
}
