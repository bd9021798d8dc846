package realnode

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"

	aboutv1beta1 "github.com/mcsd-io/mcsd/apis/about/v1beta1"
	"github.com/mcsd-io/mcsd/test/lib/conformance"
	"github.com/mcsd-io/mcsd/test/lib/echo"
	"github.com/mcsd-io/mcsd/test/lib/harness"
)

// The upstream conformance suite's specs that send traffic (the DNS specs
// and the connectivity specs) on real nodes: backends are echo pods the
// scheduler places, and every spec asks from the client pods on both nodes
// of each cluster, through their cluster DNS (CoreDNS with the shipped
// snippet, as their resolv.conf says) and their node's mcsd, and connects
// to what the cluster DNS answers.
func testConformance(t *testing.T) {
	w := setup(t)
	var specs []conformance.Spec
	for _, s := range conformance.Specs {
		if s.Traffic {
			specs = append(specs, s)
		}
	}
	began := time.Now()
	// Real pods start in seconds, not at once as the harness's: every
	// wait gets more room than the upstream 20 s.
	world := conformance.NewWorld(platform{w}, conformance.Options{ResolveVia: conformance.ClusterDNS, Await: 2 * time.Minute, Settle: snippetCache})
	conformance.Run(t, world, specs)
	t.Logf("figure: %d conformance specs with traffic on real nodes in %v", len(specs), time.Since(began).Round(10*time.Millisecond))
}

// platform runs the conformance suite's pods on the real nodes.
type platform struct{ w *world }

func (p platform) Members() []conformance.Member {
	var out []conformance.Member
	for _, m := range p.w.members {
		out = append(out, conformance.Member{ID: m.id, Kube: m.Kube, MCS: m.MCS})
	}
	return out
}

func (p platform) Families() []corev1.IPFamily { return harness.IPv4Only }

// AddPod runs an echo pod and returns it once it is Ready.
func (p platform) AddPod(ctx context.Context, i int, spec conformance.PodSpec) (conformance.Pod, error) {
	m := p.w.members[i]
	ports := spec.Ports
	if len(ports) == 0 {
		ports = []int32{echoPort}
	}
	pod := echoPod(spec.Namespace, spec.Name, m.Name, p.w.echo.Ref, spec.Labels, ports...)
	pod.Spec.Hostname, pod.Spec.Subdomain = spec.Hostname, spec.Subdomain
	created, err := createPod(ctx, m, pod)
	if err != nil {
		return nil, err
	}
	var got *corev1.Pod
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		got, err = m.Kube.CoreV1().Pods(created.Namespace).Get(ctx, created.Name, metav1.GetOptions{})
		return err == nil && podReady(got), nil
	})
	if err != nil {
		return nil, fmt.Errorf("pod %s/%s not Ready: %w", created.Namespace, created.Name, err)
	}
	return realPod{pod: got, kube: m}, nil
}

// Requesters are the member's client pods, one on each node.
func (p platform) Requesters(_ *conformance.Env, i int) ([]conformance.Requester, error) {
	var out []conformance.Requester
	for _, c := range p.w.members[i].clients {
		out = append(out, requester{c})
	}
	return out, nil
}

// realPod is a pod a spec runs.
type realPod struct {
	pod  *corev1.Pod
	kube *member
}

func (r realPod) Name() string { return r.pod.Name }

func (r realPod) IPOf(f corev1.IPFamily) (netip.Addr, bool) {
	for _, ip := range r.pod.Status.PodIPs {
		if a, err := netip.ParseAddr(ip.IP); err == nil && harness.FamilyOf(a) == f {
			return a, true
		}
	}
	return netip.Addr{}, false
}

func (r realPod) Delete(ctx context.Context) error {
	return r.kube.Kube.CoreV1().Pods(r.pod.Namespace).Delete(ctx, r.pod.Name, metav1.DeleteOptions{})
}

// requester asks from a client pod: its node's mcsd, at the node's
// address, or the nameserver of its resolv.conf.
type requester struct{ c *client }

func (r requester) String() string { return r.c.String() }

func (r requester) Query(ctx context.Context, server conformance.Server, network, name string, qtype uint16) (*dns.Msg, error) {
	if server == conformance.ClusterDNS {
		return r.c.query(network, name, qtype)
	}
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), qtype)
	var resp *dns.Msg
	err := r.c.ns.Do(func() error {
		var err error
		resp, _, err = (&dns.Client{Net: network, Timeout: 2 * time.Second}).ExchangeContext(ctx, m, netip.AddrPortFrom(r.c.node.IP, mcsdDNSPort).String())
		return err
	})
	return resp, err
}

func (r requester) Ask(ctx context.Context, network, address string) (echo.Identity, error) {
	return r.c.ask(ctx, network, address)
}

// clusterID reads the cluster ID mcsd resolved and recorded (the
// ClusterProperty cluster.clusterset.k8s.io).
func clusterID(ctx context.Context, m *member) (string, error) {
	gvr := aboutv1beta1.SchemeGroupVersion.WithResource(aboutv1beta1.Resource)
	var id string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		obj, err := m.Dynamic.Resource(gvr).Get(ctx, aboutv1beta1.ClusterIDName, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		id, _, _ = unstructured.NestedString(obj.Object, "spec", "value")
		return id != "", nil
	})
	if err != nil {
		return "", fmt.Errorf("%s: no cluster ID recorded: %w", m.Name, err)
	}
	return id, nil
}
