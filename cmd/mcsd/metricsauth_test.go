package main

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"
)

// The reviews' answers are reused for their TTL, so that scrapes cost the
// API server little; the real API server's answers are tested in
// TestRunningDaemon.
func TestDelegatedAuthCachesReviews(t *testing.T) {
	var tokenReviews, accessReviews atomic.Int32
	var apiDown atomic.Bool
	kube := fake.NewClientset()
	kube.PrependReactor("create", "tokenreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		tokenReviews.Add(1)
		if apiDown.Load() {
			return true, nil, errors.New("connection refused")
		}
		review := a.(k8stesting.CreateAction).GetObject().(*authenticationv1.TokenReview)
		if review.Spec.Token == "prometheus-token" {
			review.Status = authenticationv1.TokenReviewStatus{Authenticated: true, User: authenticationv1.UserInfo{Username: "system:serviceaccount:monitoring:prometheus"}}
		} else {
			review.Status = authenticationv1.TokenReviewStatus{Error: "invalid bearer token"}
		}
		return true, review, nil
	})
	kube.PrependReactor("create", "subjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		accessReviews.Add(1)
		review := a.(k8stesting.CreateAction).GetObject().(*authorizationv1.SubjectAccessReview)
		review.Status.Allowed = review.Spec.NonResourceAttributes.Path == "/metrics" && review.Spec.NonResourceAttributes.Verb == "get"
		return true, review, nil
	})
	clk := clocktesting.NewFakeClock(time.Now())
	served := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("metrics")) })
	auth := newDelegatedAuth(kube, clk, served)
	request := func(t *testing.T, path, token string, code int, says string) {
		t.Helper()
		r := httptest.NewRequest(http.MethodGet, path, nil)
		if token != "" {
			r.Header.Set("Authorization", "Bearer "+token)
		}
		w := httptest.NewRecorder()
		auth.ServeHTTP(w, r)
		if w.Code != code || !strings.Contains(w.Body.String(), says) {
			t.Fatalf("GET %s with %q: %d %q, want %d saying %q", path, token, w.Code, w.Body, code, says)
		}
	}
	reviews := func(t *testing.T, tokens, accesses int32) {
		t.Helper()
		if got, want := [2]int32{tokenReviews.Load(), accessReviews.Load()}, [2]int32{tokens, accesses}; got != want {
			t.Fatalf("token and access reviews %v, want %v", got, want)
		}
	}

	t.Run("a request without a token is refused without a review", func(t *testing.T) {
		request(t, "/metrics", "", http.StatusUnauthorized, "no bearer token")
		reviews(t, 0, 0)
	})
	t.Run("an accepted scrape is reviewed once per TTL", func(t *testing.T) {
		request(t, "/metrics", "prometheus-token", http.StatusOK, "metrics")
		request(t, "/metrics", "prometheus-token", http.StatusOK, "metrics")
		reviews(t, 1, 1)
		clk.Step(reviewAllowTTL + time.Second)
		request(t, "/metrics", "prometheus-token", http.StatusOK, "metrics")
		reviews(t, 2, 2)
	})
	t.Run("another path is authorized on its own", func(t *testing.T) {
		request(t, "/debug/pprof/", "prometheus-token", http.StatusForbidden, `cannot get the non-resource URL "/debug/pprof/"`)
		reviews(t, 2, 3)
	})
	t.Run("a refused token is reviewed again after the shorter TTL", func(t *testing.T) {
		request(t, "/metrics", "stolen-token", http.StatusUnauthorized, "invalid bearer token")
		request(t, "/metrics", "stolen-token", http.StatusUnauthorized, "invalid bearer token")
		reviews(t, 3, 3)
		clk.Step(reviewDenyTTL + time.Second)
		request(t, "/metrics", "stolen-token", http.StatusUnauthorized, "invalid bearer token")
		reviews(t, 4, 3)
	})
	t.Run("a review that fails is an internal error, and not remembered", func(t *testing.T) {
		clk.Step(reviewAllowTTL + time.Second)
		apiDown.Store(true)
		request(t, "/metrics", "prometheus-token", http.StatusInternalServerError, "could not review the token")
		apiDown.Store(false)
		request(t, "/metrics", "prometheus-token", http.StatusOK, "metrics")
		reviews(t, 6, 4)
	})
}
