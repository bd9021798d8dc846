package realnode

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/mcsd-io/mcsd/test/lib/echopod"
)

// echoPort is the port every echo backend answers on.
const echoPort = 8080

// namespace creates a namespace in every member (namespace sameness: a
// service is imported where its namespace exists) and deletes it when the
// test ends.
func (w *world) namespace(t *testing.T, name string) {
	t.Helper()
	ctx := context.Background()
	for _, m := range w.members {
		if _, err := m.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
			t.Fatalf("%s: creating namespace %s: %v", m.Name, name, err)
		}
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		for _, m := range w.members {
			if err := m.Kube.CoreV1().Namespaces().Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				t.Errorf("%s: deleting namespace %s: %v", m.Name, name, err)
			}
		}
		for _, m := range w.members {
			err := wait.PollUntilContextCancel(ctx, 500*time.Millisecond, true, func(ctx context.Context) (bool, error) {
				_, err := m.Kube.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
				return apierrors.IsNotFound(err), nil
			})
			if err != nil {
				t.Errorf("%s: namespace %s not gone: %v", m.Name, name, err)
			}
		}
	})
}

// backends runs a Deployment of echo pods labelled app=<app>, one on each
// of the member's nodes, and waits until they are Ready.
func (w *world) backends(ctx context.Context, t *testing.T, m *member, ns, app string) {
	t.Helper()
	replicas := int32(len(m.RealNodes()))
	pod := echopod.Spec(ns, "", m.Name, w.echo.Ref, map[string]string{"app": app}, echoPort)
	pod.Spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{
		MaxSkew: 1, TopologyKey: corev1.LabelHostname, WhenUnsatisfiable: corev1.DoNotSchedule,
		LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}},
	}}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: app},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: pod.Labels}, Spec: pod.Spec},
		},
	}
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := m.Kube.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{})
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("%s: creating Deployment %s/%s: %v", m.Name, ns, app, err)
	}
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		got, err := m.Kube.AppsV1().Deployments(ns).Get(ctx, app, metav1.GetOptions{})
		return err == nil && got.Status.ReadyReplicas == replicas, nil
	})
	if err != nil {
		t.Fatalf("%s: Deployment %s/%s not ready: %v", m.Name, ns, app, err)
	}
}

// services creates ClusterIP Services of the app's echo port and waits
// until each one's EndpointSlices list every backend Ready, so that an
// export is the only thing left to happen.
func (w *world) services(ctx context.Context, t *testing.T, m *member, ns, app string, names []string) {
	t.Helper()
	for _, name := range names {
		svc := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: corev1.ServiceSpec{
				Selector: map[string]string{"app": app},
				Ports:    []corev1.ServicePort{{Name: "tcp", Port: echoPort, Protocol: corev1.ProtocolTCP}},
			},
		}
		if _, err := m.Kube.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
			t.Fatalf("%s: creating Service %s/%s: %v", m.Name, ns, name, err)
		}
	}
	want := len(m.RealNodes())
	for _, name := range names {
		err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
			sel := labels.SelectorFromSet(labels.Set{discoveryv1.LabelServiceName: name}).String()
			list, err := m.Kube.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{LabelSelector: sel})
			if err != nil {
				return false, nil
			}
			ready := 0
			for _, s := range list.Items {
				for _, ep := range s.Endpoints {
					if ep.Conditions.Ready != nil && *ep.Conditions.Ready {
						ready++
					}
				}
			}
			return ready == want, nil
		})
		if err != nil {
			t.Fatalf("%s: Service %s/%s does not list %d ready endpoints: %v", m.Name, ns, name, want, err)
		}
	}
}

// export creates a ServiceExport for each name at once and returns when
// each create returned.
func (w *world) export(ctx context.Context, t *testing.T, m *member, ns string, names ...string) map[string]time.Time {
	t.Helper()
	at := map[string]time.Time{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	errs := make([]error, len(names))
	for i, name := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			began := time.Now()
			_, errs[i] = m.MCS.MulticlusterV1beta1().ServiceExports(ns).Create(ctx, &mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}, metav1.CreateOptions{})
			mu.Lock()
			at[name] = began
			mu.Unlock()
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("%s: exporting %s/%s: %v", m.Name, ns, names[i], err)
		}
	}
	return at
}

// fqdn is a service's clusterset name.
func fqdn(ns, name string) string { return fmt.Sprintf("%s.%s.svc.clusterset.local.", name, ns) }

// resolver asks one DNS server from a client pod.
type resolver struct {
	c *client
	// server is the address asked: the pod's nameserver (the cluster
	// DNS), or one node's mcsd.
	server string
	via    string
}

// viaClusterDNS asks what the pod's resolv.conf names.
func viaClusterDNS(c *client) resolver {
	return resolver{c: c, server: c.Nameserver, via: "the cluster DNS"}
}

// viaMCSD asks the mcsd of another node directly, at its node address.
func viaMCSD(c *client, node netip.Addr) resolver {
	return resolver{c: c, server: netip.AddrPortFrom(node, mcsdDNSPort).String(), via: "the mcsd of " + node.String()}
}

// lookup resolves a name to its first A record; ok is false for an answer
// without one (NXDOMAIN, NODATA).
func (r resolver) lookup(name string) (netip.Addr, bool, error) {
	m := new(dns.Msg)
	m.SetQuestion(name, dns.TypeA)
	var resp *dns.Msg
	err := r.c.NS.Do(func() error {
		var err error
		resp, _, err = (&dns.Client{Net: "udp", Timeout: 2 * time.Second}).Exchange(m, r.server)
		return err
	})
	if err != nil {
		return netip.Addr{}, false, err
	}
	switch resp.Rcode {
	case dns.RcodeSuccess, dns.RcodeNameError:
	default:
		return netip.Addr{}, false, fmt.Errorf("%s %s", name, dns.RcodeToString[resp.Rcode])
	}
	for _, rr := range resp.Answer {
		if a, ok := rr.(*dns.A); ok {
			addr, _ := netip.AddrFromSlice(a.A.To4())
			return addr, true, nil
		}
	}
	return netip.Addr{}, false, nil
}

// percentile is the p-th percentile (0-100) of durations.
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(float64(len(s)-1) * p / 100)
	return s[i]
}
