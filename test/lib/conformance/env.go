package conformance

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/mcsd-io/mcsd/test/lib/echo"
	"github.com/mcsd-io/mcsd/test/lib/hold"
)

// Bounds of the waits, as in the upstream suite: what must happen does so
// within AwaitTimeout (a World's default); what must not happen does not
// for HoldFor.
const (
	AwaitTimeout = 20 * time.Second
	HoldFor      = 5 * time.Second
	PollEvery    = 100 * time.Millisecond

	// Zone is the clusterset zone.
	Zone        = "clusterset.local"
	serviceName = "hello"
	// ServicePort is the port of the upstream suite's hello Service, and
	// the port its backends listen on.
	ServicePort = 42
)

// Env is one spec's world: its own namespace in every cluster (the same
// name everywhere, namespace sameness), the requester pods of every
// cluster, and whatever the spec deploys, all removed when the spec ends.
type Env struct {
	t *testing.T
	// root is the spec's own test, t's parent in a subtest of one IP
	// family: what serves the whole spec is stopped when root ends.
	root *testing.T
	ctx  context.Context
	w    *World
	ns   string
	// requesters[i] are the pods of cluster i the spec asks from.
	requesters [][]Requester
	pods       []placed
}

// placed is a pod of the spec and the cluster it runs in.
type placed struct {
	Pod
	cluster int
}

// Begin starts a spec's world in t: its namespace in every member and the
// platform's requesters.
func (w *World) Begin(t *testing.T) *Env {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	e := &Env{t: t, root: t, ctx: ctx, w: w, ns: fmt.Sprintf("mcs-conformance-%d", rand.Uint32())}
	for _, m := range w.members {
		if _, err := m.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: e.ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatalf("%s: creating namespace %s: %v", m.ID, e.ns, err)
		}
	}
	t.Cleanup(e.cleanup)
	for i := range w.members {
		rs, err := w.p.Requesters(e, i)
		if err != nil {
			t.Fatalf("%s: the spec's requesters: %v", w.members[i].ID, err)
		}
		if len(rs) == 0 {
			t.Fatalf("%s: the platform gives no requester", w.members[i].ID)
		}
		e.requesters = append(e.requesters, rs)
	}
	return e
}

// T is the test the Env reports to; Root is the spec's own test, which
// outlives the subtests of each IP family.
func (e *Env) T() *testing.T    { return e.t }
func (e *Env) Root() *testing.T { return e.root }

// Ctx bounds the spec.
func (e *Env) Ctx() context.Context { return e.ctx }

// Namespace is the spec's namespace, the same in every member.
func (e *Env) Namespace() string { return e.ns }

// Requesters are the pods of cluster i the spec asks from.
func (e *Env) Requesters(i int) []Requester { return e.requesters[i] }

// cleanup deletes the spec's pods and its namespace in every cluster, and
// waits until the namespaces are gone, so the next spec starts from a
// clusterset that holds nothing of this one.
func (e *Env) cleanup() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, p := range e.pods {
		if err := p.Delete(ctx); err != nil {
			e.t.Errorf("%s: deleting pod %s/%s: %v", e.w.members[p.cluster].ID, e.ns, p.Name(), err)
		}
	}
	for _, m := range e.w.members {
		err := m.Kube.CoreV1().Namespaces().Delete(ctx, e.ns, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			e.t.Errorf("%s: deleting namespace %s: %v", m.ID, e.ns, err)
		}
	}
	for _, m := range e.w.members {
		err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			_, err := m.Kube.CoreV1().Namespaces().Get(ctx, e.ns, metav1.GetOptions{})
			return apierrors.IsNotFound(err), nil
		})
		if err != nil {
			e.t.Errorf("%s: namespace %s not gone: %v", m.ID, e.ns, err)
		}
	}
}

// Member is cluster i.
func (e *Env) Member(i int) Member { return e.w.members[i] }

// forEachFamily runs check for each IP family the clusters share, each as
// a subtest named for the family, in the spec's world: what the spec
// deployed is checked over IPv4 and over IPv6. check must not add pods.
func (e *Env) forEachFamily(check func(e *Env, f corev1.IPFamily)) {
	e.t.Helper()
	if len(e.w.families) == 0 {
		e.t.Fatal("the clusters share no IP family")
	}
	for _, f := range e.w.families {
		e.t.Run(string(f), func(t *testing.T) { check(e.In(t), f) })
	}
}

// In is the spec's world as seen from its subtest t. Pods must not be
// added through it: the spec's cleanup would not know them.
func (e *Env) In(t *testing.T) *Env {
	sub := *e
	sub.t = t
	return &sub
}

// AddPod starts a pod in cluster i, in the spec's namespace, deleted when
// the spec ends.
func (e *Env) AddPod(i int, spec PodSpec) Pod {
	e.t.Helper()
	spec.Namespace = e.ns
	p, err := e.w.p.AddPod(e.ctx, i, spec)
	if err != nil {
		e.t.Fatalf("%s: adding pod %s: %v", e.Member(i).ID, spec.Name, err)
	}
	e.pods = append(e.pods, placed{Pod: p, cluster: i})
	return p
}

// HelloService is the upstream suite's hello Service: TCP and UDP on port
// 42, client-IP session affinity with a 10 s timeout, dual-stack where the
// cluster is (ipFamilyPolicy PreferDualStack). It also carries a label and
// an annotation of its own, which no ServiceImport may show.
func HelloService() *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{
			Name:        serviceName,
			Labels:      map[string]string{"service-label": "true"},
			Annotations: map[string]string{"service-annotation": "true"},
		},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": serviceName},
			Ports: []corev1.ServicePort{
				{Name: "tcp", Port: ServicePort, Protocol: corev1.ProtocolTCP},
				{Name: "udp", Port: ServicePort, Protocol: corev1.ProtocolUDP},
			},
			SessionAffinity: corev1.ServiceAffinityClientIP,
			SessionAffinityConfig: &corev1.SessionAffinityConfig{
				ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptr.To[int32](10)},
			},
			IPFamilyPolicy: ptr.To(corev1.IPFamilyPolicyPreferDualStack),
		},
	}
}

// HelloPods starts n backends of the hello Service in cluster i, answering
// on the service port; with a subdomain they are named and hostnamed as a
// StatefulSet's pods are (hello-0, hello-1, ...).
func (e *Env) HelloPods(i, n int, subdomain string) []Pod {
	e.t.Helper()
	var pods []Pod
	for k := range n {
		spec := PodSpec{
			Name:   fmt.Sprintf("%s-%s-%d", serviceName, e.Member(i).ID, k),
			Labels: map[string]string{"app": serviceName},
			Ports:  []int32{ServicePort},
		}
		if subdomain != "" {
			spec.Name = fmt.Sprintf("%s-%d", serviceName, k)
			spec.Hostname = spec.Name
			spec.Subdomain = subdomain
		}
		pods = append(pods, e.AddPod(i, spec))
	}
	return pods
}

// Deploy creates svc in cluster i and returns it as the API server stored it.
func (e *Env) Deploy(i int, svc *corev1.Service) *corev1.Service {
	e.t.Helper()
	svc.Namespace = e.ns
	got, err := e.Member(i).Kube.CoreV1().Services(e.ns).Create(e.ctx, svc, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatalf("%s: creating Service %s/%s: %v", e.Member(i).ID, e.ns, svc.Name, err)
	}
	return got
}

// HelloServiceExport exports the hello Service.
func HelloServiceExport() *mcsv1beta1.ServiceExport {
	return &mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Name: serviceName}}
}

// Export creates se in cluster i, in the spec's namespace.
func (e *Env) Export(i int, se *mcsv1beta1.ServiceExport) {
	e.t.Helper()
	se.Namespace = e.ns
	if _, err := e.Member(i).MCS.MulticlusterV1beta1().ServiceExports(e.ns).Create(e.ctx, se, metav1.CreateOptions{}); err != nil {
		e.t.Fatalf("%s: creating ServiceExport %s/%s: %v", e.Member(i).ID, e.ns, se.Name, err)
	}
}

func (e *Env) unexport(i int) {
	e.t.Helper()
	if err := e.Member(i).MCS.MulticlusterV1beta1().ServiceExports(e.ns).Delete(e.ctx, serviceName, metav1.DeleteOptions{}); err != nil {
		e.t.Fatalf("%s: deleting ServiceExport %s/%s: %v", e.Member(i).ID, e.ns, serviceName, err)
	}
}

// DeployHello is the upstream suite's usual setup: the hello Service and
// one backend in the first cluster, exported there.
func (e *Env) DeployHello(mutate func(*corev1.Service)) *corev1.Service {
	e.t.Helper()
	svc := HelloService()
	if mutate != nil {
		mutate(svc)
	}
	e.HelloPods(0, 1, "")
	got := e.Deploy(0, svc)
	e.Export(0, HelloServiceExport())
	return got
}

// twoClusters is the upstream suite's two-cluster setup: the hello Service
// exported from the first cluster, its ServiceImport awaited there, then a
// second Service exported from the second cluster, created at least a
// second later so that the first export is the older one at the
// granularity of creation timestamps.
func (e *Env) twoClusters(svc1, svc2 *corev1.Service, se1, se2 *mcsv1beta1.ServiceExport) {
	e.t.Helper()
	e.HelloPods(0, 1, "")
	e.Deploy(0, svc1)
	e.Export(0, se1)
	e.AwaitImport(0, nil)
	e.awaitLaterSecond(0, se1.Name)
	e.HelloPods(1, 1, "")
	e.Deploy(1, svc2)
	e.Export(1, se2)
}

func (e *Env) getImport(i int) (*mcsv1beta1.ServiceImport, error) {
	return e.Member(i).MCS.MulticlusterV1beta1().ServiceImports(e.ns).Get(e.ctx, serviceName, metav1.GetOptions{})
}

// AwaitImport waits until cluster i holds the hello ServiceImport and check
// (if any) accepts it; it fails the spec with check's last complaint.
func (e *Env) AwaitImport(i int, check func(*mcsv1beta1.ServiceImport) error) *mcsv1beta1.ServiceImport {
	e.t.Helper()
	var si *mcsv1beta1.ServiceImport
	var last error
	err := wait.PollUntilContextTimeout(e.ctx, PollEvery, e.w.await, true, func(context.Context) (bool, error) {
		var err error
		si, err = e.getImport(i)
		if err != nil {
			last = err
			return false, nil
		}
		if check != nil {
			if last = check(si); last != nil {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		e.t.Fatalf("%s: ServiceImport %s/%s not as expected within %v: %v", e.Member(i).ID, e.ns, serviceName, e.w.await, last)
	}
	return si
}

func (e *Env) awaitNoImport(i int, why string) {
	e.t.Helper()
	err := wait.PollUntilContextTimeout(e.ctx, PollEvery, e.w.await, true, func(context.Context) (bool, error) {
		_, err := e.getImport(i)
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		e.t.Fatalf("%s: %s: ServiceImport %s/%s still exists after %v", e.Member(i).ID, why, e.ns, serviceName, e.w.await)
	}
}

// holdImport checks that cluster i keeps the ServiceImport for HoldFor.
func (e *Env) holdImport(i int, why string) {
	e.t.Helper()
	if err := hold.For(e.ctx, HoldFor, PollEvery, func(context.Context) error {
		_, err := e.getImport(i)
		return err
	}); err != nil {
		e.t.Fatalf("%s: %s: ServiceImport %s/%s: %v", e.Member(i).ID, why, e.ns, serviceName, err)
	}
}

// holdNoImport checks that cluster i has no ServiceImport for HoldFor.
func (e *Env) holdNoImport(i int, why string) {
	e.t.Helper()
	if err := hold.For(e.ctx, HoldFor, PollEvery, func(context.Context) error {
		si, err := e.getImport(i)
		if err == nil {
			return fmt.Errorf("found it: %+v", si.Spec)
		}
		if !apierrors.IsNotFound(err) {
			return err
		}
		return nil
	}); err != nil {
		e.t.Fatalf("%s: %s: ServiceImport %s/%s: %v", e.Member(i).ID, why, e.ns, serviceName, err)
	}
}

// awaitLaterSecond waits until the clock has left the second in which
// cluster i's ServiceExport name was created. Creation timestamps have a
// granularity of one second, and precedence goes by them: an export made
// after this is older by them, not tied.
func (e *Env) awaitLaterSecond(i int, name string) {
	e.t.Helper()
	se, err := e.Member(i).MCS.MulticlusterV1beta1().ServiceExports(e.ns).Get(e.ctx, name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatalf("%s: getting ServiceExport %s/%s: %v", e.Member(i).ID, e.ns, name, err)
	}
	created := se.CreationTimestamp.Time
	if err := wait.PollUntilContextTimeout(e.ctx, 10*time.Millisecond, e.w.await, true, func(context.Context) (bool, error) {
		return time.Now().Truncate(time.Second).After(created), nil
	}); err != nil {
		e.t.Fatalf("the clock did not pass %v: %v", created, err)
	}
}

// awaitCondition waits until cluster i's hello ServiceExport has the
// condition with the given status, and returns it.
func (e *Env) awaitCondition(i int, condType mcsv1beta1.ServiceExportConditionType, status metav1.ConditionStatus) metav1.Condition {
	e.t.Helper()
	var got *metav1.Condition
	err := wait.PollUntilContextTimeout(e.ctx, PollEvery, e.w.await, true, func(ctx context.Context) (bool, error) {
		se, err := e.Member(i).MCS.MulticlusterV1beta1().ServiceExports(e.ns).Get(ctx, serviceName, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		got = meta.FindStatusCondition(se.Status.Conditions, string(condType))
		return got != nil && got.Status == status, nil
	})
	if err != nil {
		e.t.Fatalf("%s: ServiceExport %s/%s condition %s = %+v, want status %s within %v", e.Member(i).ID, e.ns, serviceName, condType, got, status, e.w.await)
	}
	return *got
}

// checkFamilies is what every ServiceImport must satisfy: ipFamilies set,
// and for ClusterSetIP one IP per family, in the family's order.
func checkFamilies(si *mcsv1beta1.ServiceImport) error {
	if len(si.Spec.IPFamilies) == 0 {
		return fmt.Errorf("spec.ipFamilies is empty")
	}
	if si.Spec.Type != mcsv1beta1.ClusterSetIP {
		return nil
	}
	if len(si.Spec.IPs) != len(si.Spec.IPFamilies) {
		return fmt.Errorf("spec.ips %v does not match spec.ipFamilies %v", si.Spec.IPs, si.Spec.IPFamilies)
	}
	for k, ip := range si.Spec.IPs {
		a, err := netip.ParseAddr(ip)
		if err != nil {
			return fmt.Errorf("spec.ips[%d] %q is not an IP", k, ip)
		}
		if family(a) != si.Spec.IPFamilies[k] {
			return fmt.Errorf("spec.ips[%d] %s is not of family %s", k, ip, si.Spec.IPFamilies[k])
		}
	}
	return nil
}

func family(a netip.Addr) corev1.IPFamily {
	if a.Is4() {
		return corev1.IPv4Protocol
	}
	return corev1.IPv6Protocol
}

func addressType(f corev1.IPFamily) discoveryv1.AddressType {
	if f == corev1.IPv6Protocol {
		return discoveryv1.AddressTypeIPv6
	}
	return discoveryv1.AddressTypeIPv4
}

func recordType(f corev1.IPFamily) uint16 {
	if f == corev1.IPv6Protocol {
		return dns.TypeAAAA
	}
	return dns.TypeA
}

// awaitFamilies waits for the hello ServiceImport in cluster i and returns
// its IP families.
func (e *Env) awaitFamilies(i int) []corev1.IPFamily {
	e.t.Helper()
	return e.AwaitImport(i, checkFamilies).Spec.IPFamilies
}

// MCSSlices lists cluster i's MCS EndpointSlices of the hello service: those
// with both MCS labels.
func (e *Env) MCSSlices(ctx context.Context, i int) ([]discoveryv1.EndpointSlice, error) {
	sel := labels.SelectorFromSet(labels.Set{mcsv1beta1.LabelServiceName: serviceName})
	list, err := e.Member(i).Kube.DiscoveryV1().EndpointSlices(e.ns).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
	if err != nil {
		return nil, err
	}
	var out []discoveryv1.EndpointSlice
	for _, s := range list.Items {
		if _, ok := s.Labels[mcsv1beta1.LabelSourceCluster]; ok {
			out = append(out, s)
		}
	}
	return out, nil
}

// awaitMCSSlice waits until cluster i holds an MCS EndpointSlice of the
// address type with endpoints that check (if any) accepts, and returns it.
func (e *Env) awaitMCSSlice(i int, at discoveryv1.AddressType, check func(*discoveryv1.EndpointSlice) error) *discoveryv1.EndpointSlice {
	e.t.Helper()
	var found *discoveryv1.EndpointSlice
	last := errors.New("no MCS EndpointSlice (with both " + mcsv1beta1.LabelServiceName + " and " + mcsv1beta1.LabelSourceCluster + ") with endpoints")
	err := wait.PollUntilContextTimeout(e.ctx, PollEvery, e.w.await, true, func(ctx context.Context) (bool, error) {
		list, err := e.MCSSlices(ctx, i)
		if err != nil {
			last = err
			return false, nil
		}
		for k := range list {
			s := &list[k]
			if s.AddressType != at || len(s.Endpoints) == 0 {
				continue
			}
			if check != nil {
				if last = check(s); last != nil {
					continue
				}
			}
			found = s
			return true, nil
		}
		return false, nil
	})
	if err != nil {
		e.t.Fatalf("%s: %s MCS EndpointSlice of %s/%s not as expected within %v: %v", e.Member(i).ID, at, e.ns, serviceName, e.w.await, last)
	}
	return found
}

// endpoint is a ready endpoint address of a core EndpointSlice, with the
// name DNS gives it: its hostname, or else its address with dashes.
type endpoint struct {
	address, hostname string
}

// awaitEndpoints waits until the core EndpointSlices of the hello Service in
// cluster i list exactly want ready endpoints of the address type, and
// returns them.
func (e *Env) awaitEndpoints(i int, at discoveryv1.AddressType, want int) []endpoint {
	e.t.Helper()
	var eps []endpoint
	err := wait.PollUntilContextTimeout(e.ctx, PollEvery, e.w.await, true, func(ctx context.Context) (bool, error) {
		sel := labels.SelectorFromSet(labels.Set{discoveryv1.LabelServiceName: serviceName})
		list, err := e.Member(i).Kube.DiscoveryV1().EndpointSlices(e.ns).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
		if err != nil {
			return false, nil
		}
		eps = nil
		for _, s := range list.Items {
			if s.AddressType != at {
				continue
			}
			for _, ep := range s.Endpoints {
				if !ptr.Deref(ep.Conditions.Ready, true) {
					return false, nil
				}
				for _, a := range ep.Addresses {
					name := ptr.Deref(ep.Hostname, "")
					if name == "" {
						name = strings.NewReplacer(".", "-", ":", "-").Replace(a)
					}
					eps = append(eps, endpoint{address: a, hostname: name})
				}
			}
		}
		return len(eps) == want, nil
	})
	if err != nil {
		e.t.Fatalf("%s: core EndpointSlices of %s/%s list %v, want %d ready endpoints", e.Member(i).ID, e.ns, serviceName, eps, want)
	}
	return eps
}

// FQDN is the hello service's clusterset name, with any labels before it.
func (e *Env) FQDN(prefix ...string) string {
	return dns.Fqdn(strings.Join(append(prefix, serviceName, e.ns, "svc", Zone), "."))
}

// Query asks a DNS server of cluster i from its first requester, over
// network ("udp" or "tcp"): the server the connectivity specs resolve with.
func (e *Env) Query(i int, network, name string, qtype uint16) (*dns.Msg, error) {
	return e.queryFrom(e.requesters[i][0], e.w.resolveVia, network, name, qtype)
}

func (e *Env) queryFrom(r Requester, server Server, network, name string, qtype uint16) (*dns.Msg, error) {
	ctx, cancel := context.WithTimeout(e.ctx, 5*time.Second)
	defer cancel()
	return r.Query(ctx, server, network, dns.Fqdn(name), qtype)
}

// Addresses are the A/AAAA answers of a response, sorted.
func Addresses(m *dns.Msg) []string {
	var out []string
	for _, rr := range m.Answer {
		switch rr := rr.(type) {
		case *dns.A:
			out = append(out, rr.A.String())
		case *dns.AAAA:
			out = append(out, rr.AAAA.String())
		}
	}
	slices.Sort(out)
	return out
}

type srv struct {
	port   uint16
	target string
}

func srvRecords(m *dns.Msg) []srv {
	var out []srv
	for _, rr := range m.Answer {
		if rr, ok := rr.(*dns.SRV); ok {
			out = append(out, srv{port: rr.Port, target: strings.TrimSuffix(rr.Target, ".")})
		}
	}
	slices.SortFunc(out, func(a, b srv) int {
		if c := strings.Compare(a.target, b.target); c != 0 {
			return c
		}
		return int(a.port) - int(b.port)
	})
	return out
}

// AwaitAnswer asks cluster i's DNS from each of its requesters over UDP
// and TCP, both mcsd's server and the cluster's own DNS (CoreDNS, through
// the shipped snippet), until check accepts every answer, and fails the
// spec with check's last complaint otherwise.
func (e *Env) AwaitAnswer(i int, name string, qtype uint16, check func(*dns.Msg) error) {
	e.t.Helper()
	var last error
	err := wait.PollUntilContextTimeout(e.ctx, 200*time.Millisecond, e.w.await, true, func(context.Context) (bool, error) {
		for _, r := range e.requesters[i] {
			for _, network := range []string{"udp", "tcp"} {
				for _, server := range []Server{MCSD, ClusterDNS} {
					m, err := e.queryFrom(r, server, network, name, qtype)
					if err != nil {
						last = fmt.Errorf("%s asking %s over %s: %w", r, server, network, err)
						return false, nil
					}
					if err := check(m); err != nil {
						last = fmt.Errorf("%s asking %s over %s: %w (answer: %v)", r, server, network, err, m.Answer)
						return false, nil
					}
				}
			}
		}
		return true, nil
	})
	if err != nil {
		e.t.Fatalf("%s: DNS %s %s from a pod, not as expected within %v: %v", e.Member(i).ID, dns.TypeToString[qtype], name, e.w.await, last)
	}
}

// resolve looks the hello service's clusterset name up from a requester,
// as a pod's resolver would, for an address of family f (an A or AAAA
// query), and returns its first address.
func (e *Env) resolve(r Requester, f corev1.IPFamily) (netip.Addr, error) {
	qtype := recordType(f)
	m, err := e.queryFrom(r, e.w.resolveVia, "udp", e.FQDN(), qtype)
	if err != nil {
		return netip.Addr{}, err
	}
	if m.Rcode != dns.RcodeSuccess {
		return netip.Addr{}, fmt.Errorf("%s %s %s", e.FQDN(), dns.TypeToString[qtype], dns.RcodeToString[m.Rcode])
	}
	addrs := Addresses(m)
	if len(addrs) == 0 {
		return netip.Addr{}, fmt.Errorf("%s has no %s record", e.FQDN(), dns.TypeToString[qtype])
	}
	a, err := netip.ParseAddr(addrs[0])
	if err == nil && family(a) != f {
		err = fmt.Errorf("%s %s answered %s", e.FQDN(), dns.TypeToString[qtype], a)
	}
	return a, err
}

// Ask connects from cluster i's first requester to the hello service's
// clusterset name on port, over family f, through DNS and the proxier,
// and returns which backend answered.
func (e *Env) Ask(i int, f corev1.IPFamily, network string, port int) (echo.Identity, error) {
	return e.askFrom(e.requesters[i][0], f, network, port)
}

func (e *Env) askFrom(r Requester, f corev1.IPFamily, network string, port int) (echo.Identity, error) {
	vip, err := e.resolve(r, f)
	if err != nil {
		return echo.Identity{}, err
	}
	return e.connectFrom(r, network, vip, port)
}

// Connect asks the backend behind vip:port from cluster i's first
// requester.
func (e *Env) Connect(i int, network string, vip netip.Addr, port int) (echo.Identity, error) {
	return e.connectFrom(e.requesters[i][0], network, vip, port)
}

func (e *Env) connectFrom(r Requester, network string, vip netip.Addr, port int) (echo.Identity, error) {
	ctx, cancel := context.WithTimeout(e.ctx, 2*time.Second)
	defer cancel()
	return r.Ask(ctx, network, netip.AddrPortFrom(vip, uint16(port)).String())
}

// awaitOnly connects from every requester of every cluster to the hello
// service's clusterset name on port, over family f and each of networks
// ("tcp", "udp"), until a backend in want answers each, then asks at
// least n more times and for at least HoldFor, taking the networks in
// turn: every answer must come from a pod in want, reached at its address
// of family f.
func (e *Env) awaitOnly(f corev1.IPFamily, networks []string, port int, want []Pod, n int) {
	e.t.Helper()
	ok := map[string]bool{}
	var names []string
	for _, p := range want {
		ip, has := p.IPOf(f)
		if !has {
			e.t.Fatalf("%s has no %s address", e.podName(p), f)
		}
		ok[ip.String()] = true
		names = append(names, e.podName(p))
	}
	for i := range e.w.members {
		for _, r := range e.requesters[i] {
			for _, network := range networks {
				var last error
				// When the name does not resolve yet, the first
				// connection after it does is made at once and must
				// succeed: a name mcsd's DNS hands out is already
				// reachable. Later failures (a port or endpoints still on
				// their way) are retried.
				first, strict := true, false
				err := wait.PollUntilContextTimeout(e.ctx, 200*time.Millisecond, e.w.await, true, func(context.Context) (bool, error) {
					vip, err := e.resolve(r, f)
					if err != nil {
						strict = strict || first
						first = false
						last = err
						return false, nil
					}
					first = false
					id, err := e.connectFrom(r, network, vip, port)
					if err != nil && strict {
						return false, fmt.Errorf("%s resolved to %s, and the %s connection made at once failed: %w", e.FQDN(), vip, network, err)
					}
					strict = false
					if err != nil {
						last = err
						return false, nil
					}
					if !ok[id.IP] {
						last = fmt.Errorf("answered by %s", id)
						return false, nil
					}
					return true, nil
				})
				if err != nil {
					e.t.Fatalf("%s: %s: %s:%d over %s/%s never answered by %v within %v: %v", e.Member(i).ID, r, e.FQDN(), port, f, network, names, e.w.await, last)
				}
			}
			e.settleName(r, f)
			// The proxier applies what the importer writes a moment
			// later: keep asking for HoldFor, not only n times, so that a
			// backend that must not answer has the time to show.
			end := time.Now().Add(HoldFor)
			for k := 0; k < n || time.Now().Before(end); k++ {
				network := networks[k%len(networks)]
				id, err := e.askFrom(r, f, network, port)
				if err != nil {
					e.t.Fatalf("%s: %s: connection %d to %s:%d over %s/%s: %v", e.Member(i).ID, r, k+1, e.FQDN(), port, f, network, err)
				}
				if !ok[id.IP] {
					e.t.Fatalf("%s: %s: connection %d to %s:%d over %s/%s answered by %s, want only %v", e.Member(i).ID, r, k+1, e.FQDN(), port, f, network, id, names)
				}
				time.Sleep(PollEvery)
			}
		}
	}
}

// podName is a pod of the spec as <cluster>/<name>.
func (e *Env) podName(p Pod) string {
	for _, q := range e.pods {
		if q.Pod == p {
			return e.Member(q.cluster).ID + "/" + p.Name()
		}
	}
	return p.Name()
}

// settleName waits until the hello service's name has resolved for the
// requester without a miss for the world's Settle.
func (e *Env) settleName(r Requester, f corev1.IPFamily) {
	e.t.Helper()
	if e.w.settle <= 0 {
		return
	}
	var since time.Time
	var last error
	err := wait.PollUntilContextTimeout(e.ctx, PollEvery, e.w.await, true, func(context.Context) (bool, error) {
		if _, err := e.resolve(r, f); err != nil {
			since, last = time.Time{}, err
			return false, nil
		}
		if since.IsZero() {
			since = time.Now()
		}
		return time.Since(since) >= e.w.settle, nil
	})
	if err != nil {
		e.t.Fatalf("%s: %s did not resolve steadily for %v within %v: %v", r, e.FQDN(), e.w.settle, e.w.await, last)
	}
}

// noConnect checks that n connections from every requester of every
// cluster to the hello service's clusterset name on port, over family f
// and each of networks, reach nobody.
func (e *Env) noConnect(f corev1.IPFamily, networks []string, port int, n int) {
	e.t.Helper()
	for i := range e.w.members {
		for _, r := range e.requesters[i] {
			for k := range n {
				network := networks[k%len(networks)]
				if id, err := e.askFrom(r, f, network, port); err == nil {
					e.t.Fatalf("%s: %s: connection %d to %s:%d over %s/%s answered by %s, want no answer", e.Member(i).ID, r, k+1, e.FQDN(), port, f, network, id)
				}
			}
		}
	}
}

func portsString(ports []mcsv1beta1.ServicePort) string {
	var out []string
	for _, p := range ports {
		out = append(out, p.Name+"/"+string(p.Protocol)+"/"+strconv.Itoa(int(p.Port))+"/"+ptr.Deref(p.AppProtocol, ""))
	}
	return strings.Join(out, ",")
}

// mcsPorts are a Service's ports as a ServiceImport shows them, sorted.
func mcsPorts(ports ...corev1.ServicePort) []mcsv1beta1.ServicePort {
	var out []mcsv1beta1.ServicePort
	for _, p := range ports {
		out = append(out, mcsv1beta1.ServicePort{Name: p.Name, Protocol: p.Protocol, AppProtocol: p.AppProtocol, Port: p.Port})
	}
	return sortPorts(out)
}

func sortPorts(ports []mcsv1beta1.ServicePort) []mcsv1beta1.ServicePort {
	ports = slices.Clone(ports)
	slices.SortFunc(ports, func(a, b mcsv1beta1.ServicePort) int {
		return strings.Compare(strings.ToLower(a.Name), strings.ToLower(b.Name))
	})
	return ports
}

// checkPorts accepts a ServiceImport whose ports are exactly want.
func checkPorts(want []mcsv1beta1.ServicePort) func(*mcsv1beta1.ServiceImport) error {
	return func(si *mcsv1beta1.ServiceImport) error {
		if got := portsString(sortPorts(si.Spec.Ports)); got != portsString(want) {
			return fmt.Errorf("ports %s, want %s", got, portsString(want))
		}
		return nil
	}
}
