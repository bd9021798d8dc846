package main

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/cache"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// How long a review's answer is reused, as the API server's delegating
// authenticator and authorizer do (10s): a scrape every 15s or more costs
// one TokenReview and one SubjectAccessReview, and a revoked token or
// grant stops working within the TTL. Refusals are kept shorter, so that a
// grant just made is seen soon, but kept: a scraper retrying with a bad
// token does not cost a review per request.
const (
	reviewAllowTTL = 10 * time.Second
	reviewDenyTTL  = 2 * time.Second
	// reviewCacheSize bounds the memory that requests with ever new
	// tokens can take.
	reviewCacheSize = 1024
)

// delegatedAuth guards a handler as kube-scheduler and
// kube-controller-manager guard their /metrics, with the answers of the
// local cluster's API server: the request's bearer token is authenticated
// by a TokenReview, and its user authorized by a SubjectAccessReview of the
// request's method on its path as a non-resource URL (get /metrics). It is
// what k8s.io/apiserver's delegating options do, on client-go's clients
// alone: those options bring in the generic API server and, with it,
// cel-go, gRPC, OpenTelemetry and the etcd client.
type delegatedAuth struct {
	kube kubernetes.Interface
	// users maps a token's hash to its reviewed user (or nil: not
	// authenticated); decisions maps a SubjectAccessReview's spec to its
	// decision.
	users, decisions *cache.LRUExpireCache
	next             http.Handler
}

// reviewedUser is who a token belongs to, and why not when it is refused.
type reviewedUser struct {
	info   *authenticationv1.UserInfo
	reason string
}

// decision is a SubjectAccessReview's answer.
type decision struct {
	allowed bool
	reason  string
}

func newDelegatedAuth(kube kubernetes.Interface, clk clock.PassiveClock, next http.Handler) *delegatedAuth {
	return &delegatedAuth{
		kube:      kube,
		users:     cache.NewLRUExpireCacheWithClock(reviewCacheSize, clk),
		decisions: cache.NewLRUExpireCacheWithClock(reviewCacheSize, clk),
		next:      next,
	}
}

func (a *delegatedAuth) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	logger := klog.FromContext(r.Context())
	token, ok := bearerToken(r)
	if !ok {
		refuse(w, http.StatusUnauthorized, "Unauthorized: no bearer token; send a ServiceAccount token (Authorization: Bearer TOKEN), which mcsd has the cluster's API server review")
		return
	}
	user, err := a.authenticate(r.Context(), token)
	if err != nil {
		logger.Error(err, "Could not review a token", "path", r.URL.Path)
		refuse(w, http.StatusInternalServerError, "Internal error: the API server could not review the token: "+err.Error())
		return
	}
	if user.info == nil {
		refuse(w, http.StatusUnauthorized, "Unauthorized: the API server does not accept the token"+withReason(user.reason))
		return
	}
	verb := strings.ToLower(r.Method)
	d, err := a.authorize(r.Context(), user.info, verb, r.URL.Path)
	if err != nil {
		logger.Error(err, "Could not review an access", "user", user.info.Username, "verb", verb, "path", r.URL.Path)
		refuse(w, http.StatusInternalServerError, "Internal error: the API server could not review the access: "+err.Error())
		return
	}
	if !d.allowed {
		logger.V(4).Info("Refused an unauthorized request", "user", user.info.Username, "verb", verb, "path", r.URL.Path, "reason", d.reason)
		refuse(w, http.StatusForbidden, fmt.Sprintf("Forbidden: user %q cannot %s the non-resource URL %q%s; grant it with a ClusterRole such as mcsd-metrics-reader (nonResourceURLs: [%q], verbs: [%q])",
			user.info.Username, verb, r.URL.Path, withReason(d.reason), r.URL.Path, verb))
		return
	}
	a.next.ServeHTTP(w, r)
}

// authenticate is the token's user, from the cache or a TokenReview; an
// error is the review failing, not the token.
func (a *delegatedAuth) authenticate(ctx context.Context, token string) (reviewedUser, error) {
	key := sha256.Sum256([]byte(token))
	if u, ok := a.users.Get(key); ok {
		return u.(reviewedUser), nil
	}
	review, err := a.kube.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{
		Spec: authenticationv1.TokenReviewSpec{Token: token},
	}, metav1.CreateOptions{})
	if err != nil {
		return reviewedUser{}, err
	}
	u := reviewedUser{reason: review.Status.Error}
	ttl := reviewDenyTTL
	if review.Status.Authenticated {
		u.info, ttl = &review.Status.User, reviewAllowTTL
	}
	a.users.Add(key, u, ttl)
	return u, nil
}

// authorize is whether user may verb the non-resource URL path, from the
// cache or a SubjectAccessReview.
func (a *delegatedAuth) authorize(ctx context.Context, user *authenticationv1.UserInfo, verb, path string) (decision, error) {
	spec := authorizationv1.SubjectAccessReviewSpec{
		User:                  user.Username,
		UID:                   user.UID,
		Groups:                user.Groups,
		NonResourceAttributes: &authorizationv1.NonResourceAttributes{Path: path, Verb: verb},
	}
	if len(user.Extra) > 0 {
		spec.Extra = make(map[string]authorizationv1.ExtraValue, len(user.Extra))
		for k, v := range user.Extra {
			spec.Extra[k] = authorizationv1.ExtraValue(v)
		}
	}
	// The whole spec is the key, as the API server's webhook authorizer
	// keys its cache.
	raw, err := json.Marshal(spec)
	if err != nil {
		return decision{}, err
	}
	key := string(raw)
	if d, ok := a.decisions.Get(key); ok {
		return d.(decision), nil
	}
	review, err := a.kube.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: spec}, metav1.CreateOptions{})
	if err != nil {
		return decision{}, err
	}
	d := decision{allowed: review.Status.Allowed && !review.Status.Denied, reason: review.Status.Reason}
	ttl := reviewDenyTTL
	if d.allowed {
		ttl = reviewAllowTTL
	}
	a.decisions.Add(key, d, ttl)
	return d, nil
}

// bearerToken is the token of the request's Authorization header.
func bearerToken(r *http.Request) (string, bool) {
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token = strings.TrimSpace(token)
	return token, token != ""
}

// refuse answers code with a sentence saying why and what to do.
func refuse(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	if code == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="mcsd"`)
	}
	w.WriteHeader(code)
	fmt.Fprintln(w, msg)
}

func withReason(reason string) string {
	if reason == "" {
		return ""
	}
	return " (" + reason + ")"
}
