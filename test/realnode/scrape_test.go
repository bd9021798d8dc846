package realnode

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// mcsdPod is one running mcsd pod (node agent or controller) and the HTTP
// client that reaches it from inside its network namespace.
type mcsdPod struct {
	m    *member
	pod  *corev1.Pod
	http *http.Client
	// metrics and health are the pod's /metrics (HTTPS) and health base
	// URLs; token is a bearer token that may read /metrics.
	metrics, health, token string
}

// Who reads mcsd's /metrics in the real-node run: a ServiceAccount as a
// Prometheus runs as, bound to a ClusterRole granting get on /metrics
// (docs/reference/metrics.md).
const (
	readerNamespace = "monitoring"
	readerName      = "prometheus"
	readerRole      = "realnode-metrics-reader"
)

// metricsToken returns a token of m's metrics reader, creating it and its
// grant the first time.
func metricsToken(ctx context.Context, m *member) (string, error) {
	kube := m.Kube
	for _, create := range []func() error{
		func() error {
			_, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: readerNamespace}}, metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := kube.CoreV1().ServiceAccounts(readerNamespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: readerName}}, metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := kube.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: readerRole},
				Rules: []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}}}, metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := kube.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: readerRole},
				RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: readerRole},
				Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: readerNamespace, Name: readerName}}}, metav1.CreateOptions{})
			return err
		},
	} {
		if err := create(); err != nil && !apierrors.IsAlreadyExists(err) {
			return "", fmt.Errorf("%s: the metrics reader: %w", m.Name, err)
		}
	}
	tr, err := kube.CoreV1().ServiceAccounts(readerNamespace).CreateToken(ctx, readerName,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("%s: a token of %s/%s: %w", m.Name, readerNamespace, readerName, err)
	}
	return tr.Status.Token, nil
}

// mcsdPods returns the running node agent and controller pods of m.
func mcsdPods(ctx context.Context, m *member) ([]*mcsdPod, error) {
	pods, err := m.Kube.CoreV1().Pods(mcsdNamespace).List(ctx, metav1.ListOptions{
		LabelSelector: "app.kubernetes.io/name=mcsd,app.kubernetes.io/component in (node-agent,controller)"})
	if err != nil {
		return nil, err
	}
	token, err := metricsToken(ctx, m)
	if err != nil {
		return nil, err
	}
	var out []*mcsdPod
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil {
			continue
		}
		node, err := m.RealNode(p.Spec.NodeName)
		if err != nil {
			return nil, err
		}
		ns, err := node.PodNS(p)
		if err != nil {
			return nil, err
		}
		metrics, err := flagAddress(p, "--metrics-address")
		if err != nil {
			return nil, err
		}
		health, err := flagAddress(p, "--health-address")
		if err != nil {
			return nil, err
		}
		// Each pod's serving certificate is its own, self-signed: the
		// token is what the scrape proves (docs/reference/metrics.md).
		out = append(out, &mcsdPod{m: m, pod: p, metrics: "https://" + metrics + "/metrics", health: "http://" + health, token: token,
			http: &http.Client{Transport: &http.Transport{DialContext: ns.Dial, DisableKeepAlives: true, TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no mcsd pod runs in %s", m.Name, mcsdNamespace)
	}
	return out, nil
}

// flagAddress is the HOST:PORT the pod's mcsd container was given with
// flag, its $(POD_IP) the pod's address.
func flagAddress(p *corev1.Pod, flag string) (string, error) {
	for _, arg := range p.Spec.Containers[0].Args {
		if v, ok := strings.CutPrefix(arg, flag+"="); ok {
			v = strings.ReplaceAll(v, "$(POD_IP)", p.Status.PodIP)
			host, port, err := net.SplitHostPort(v)
			if err != nil {
				return "", fmt.Errorf("pod %s: %s=%s: %w", p.Name, flag, v, err)
			}
			// mcsd takes [IPv4]:port; a URL does not.
			return net.JoinHostPort(host, port), nil
		}
	}
	return "", fmt.Errorf("pod %s: no %s in %q", p.Name, flag, p.Spec.Containers[0].Args)
}

// get returns the body of the pod's url.
func (p *mcsdPod) get(ctx context.Context, url string) (string, error) {
	token := ""
	if url == p.metrics {
		token = p.token
	}
	body, err := httpGet(ctx, p.http, url, token)
	if err != nil {
		return "", fmt.Errorf("%s: pod %s: %w", p.m.Name, p.pod.Name, err)
	}
	return string(body), nil
}

// httpGet returns the body of url, which must answer 200, asked with
// token as bearer when it is not empty.
func httpGet(ctx context.Context, c *http.Client, url, token string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s %v\n%s", url, resp.Status, err, body)
	}
	return body, nil
}

// seriesNames returns the names of the samples the pod's /metrics has
// (a histogram's as name_bucket, name_sum and name_count, as PromQL names
// them).
func (p *mcsdPod) seriesNames(ctx context.Context) (map[string]bool, error) {
	body, err := p.get(ctx, p.metrics)
	if err != nil {
		return nil, err
	}
	names := map[string]bool{}
	sc := bufio.NewScanner(strings.NewReader(body))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		if end := strings.IndexAny(line, "{ "); end > 0 {
			names[line[:end]] = true
		}
	}
	return names, sc.Err()
}
