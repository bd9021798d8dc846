package e2e

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

	"github.com/mcsd-io/mcsd/test/echo"
	"github.com/mcsd-io/mcsd/test/fixture"
	"github.com/mcsd-io/mcsd/test/harness"
	"github.com/mcsd-io/mcsd/test/hold"
)

// Bounds of the waits, as in the upstream suite: what must happen does so
// within awaitTimeout; what must not happen does not for holdFor.
const (
	awaitTimeout = 20 * time.Second
	holdFor      = 5 * time.Second
	pollEvery    = 100 * time.Millisecond

	zone        = "clusterset.local"
	serviceName = "hello"
	// servicePort is the port of the upstream suite's hello Service, and
	// the port its backends listen on.
	servicePort = 42
)

// clusterSet is the one ClusterSet every spec runs in: a broker and two
// member clusters, one node each, one mcsd per cluster with its data plane
// and DNS server in that node.
type clusterSet struct {
	cs      *harness.ClusterSet
	members []*fixture.Member
	nodes   []*harness.Node
	daemons []*fixture.Daemon
	// families are the IP families every member serves.
	families []corev1.IPFamily
}

// startClusterSet starts IPv4-only clusters.
func startClusterSet(t *testing.T) *clusterSet {
	t.Helper()
	return startClusterSetWith(t, harness.Options{Clusters: 2})
}

// startClusterSetWith starts the clusters opts asks for (IP families, for
// one), each with one node and its mcsd, run for the cluster's families.
func startClusterSetWith(t *testing.T, opts harness.Options) *clusterSet {
	t.Helper()
	cs := harness.Start(t, opts)
	s := &clusterSet{cs: cs, members: fixture.Join(t, cs), families: harness.SharedFamilies(cs.Members...)}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	for _, m := range s.members {
		node, err := m.AddNode(ctx)
		if err != nil {
			t.Fatalf("adding a node to %s: %v", m.ID, err)
		}
		s.nodes = append(s.nodes, node)
		s.daemons = append(s.daemons, fixture.StartDaemon(t, cs, m, node, fixture.DaemonOptions{}))
	}
	return s
}

// specEnv is one spec's world: its own namespace in every cluster (the
// same name everywhere, namespace sameness), a request pod in every
// cluster, and whatever the spec deploys, all removed when the spec ends.
type specEnv struct {
	t *testing.T
	// root is the spec's own test, t's parent in a subtest of one IP
	// family: what serves the whole spec is stopped when root ends.
	root *testing.T
	ctx  context.Context
	s    *clusterSet
	ns   string
	// requests[i] is the request pod in cluster i, on the node whose mcsd
	// answers its DNS queries.
	requests []*harness.Pod
	pods     []*harness.Pod
	// clusterDNS[i] is cluster i's own DNS with the CoreDNS snippet, once
	// a spec asks it.
	clusterDNS map[int]*clusterDNS
}

func (s *clusterSet) begin(t *testing.T) *specEnv {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	e := &specEnv{t: t, root: t, ctx: ctx, s: s, ns: fmt.Sprintf("mcs-conformance-%d", rand.Uint32()), clusterDNS: map[int]*clusterDNS{}}
	for _, m := range s.members {
		if _, err := m.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: e.ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatalf("%s: creating namespace %s: %v", m.ID, e.ns, err)
		}
	}
	t.Cleanup(e.cleanup)
	for i := range s.members {
		e.requests = append(e.requests, e.addPod(i, harness.PodSpec{Name: "request", Labels: map[string]string{"app": "request"}}))
	}
	return e
}

// cleanup deletes the spec's pods and its namespace in every cluster, and
// waits until the namespaces are gone, so the next spec starts from a
// clusterset that holds nothing of this one.
func (e *specEnv) cleanup() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, p := range e.pods {
		if err := p.Delete(ctx); err != nil {
			e.t.Errorf("deleting pod %s/%s: %v", p.Namespace, p.Name, err)
		}
	}
	for _, m := range e.s.members {
		err := m.Kube.CoreV1().Namespaces().Delete(ctx, e.ns, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			e.t.Errorf("%s: deleting namespace %s: %v", m.ID, e.ns, err)
		}
	}
	for _, m := range e.s.members {
		err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			_, err := m.Kube.CoreV1().Namespaces().Get(ctx, e.ns, metav1.GetOptions{})
			return apierrors.IsNotFound(err), nil
		})
		if err != nil {
			e.t.Errorf("%s: namespace %s not gone: %v", m.ID, e.ns, err)
		}
	}
}

func (e *specEnv) member(i int) *fixture.Member { return e.s.members[i] }

// forEachFamily runs check for each IP family the clusters share, each as
// a subtest named for the family, in the spec's world: what the spec
// deployed is checked over IPv4 and over IPv6. check must not add pods.
func (e *specEnv) forEachFamily(check func(e *specEnv, f corev1.IPFamily)) {
	e.t.Helper()
	if len(e.s.families) == 0 {
		e.t.Fatal("the clusters share no IP family")
	}
	for _, f := range e.s.families {
		e.t.Run(string(f), func(t *testing.T) { check(e.in(t), f) })
	}
}

// in is the spec's world as seen from its subtest t. Pods must not be
// added through it: the spec's cleanup would not know them.
func (e *specEnv) in(t *testing.T) *specEnv {
	sub := *e
	sub.t = t
	return &sub
}

func (e *specEnv) addPod(i int, spec harness.PodSpec) *harness.Pod {
	e.t.Helper()
	spec.Namespace = e.ns
	p, err := e.s.nodes[i].AddPod(e.ctx, spec)
	if err != nil {
		e.t.Fatalf("%s: adding pod %s: %v", e.member(i).ID, spec.Name, err)
	}
	e.pods = append(e.pods, p)
	return p
}

// helloService is the upstream suite's hello Service: TCP and UDP on port
// 42, client-IP session affinity with a 10 s timeout, dual-stack where the
// cluster is (ipFamilyPolicy PreferDualStack). It also carries a label and
// an annotation of its own, which no ServiceImport may show.
func helloService() *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{
			Name:        serviceName,
			Labels:      map[string]string{"service-label": "true"},
			Annotations: map[string]string{"service-annotation": "true"},
		},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": serviceName},
			Ports: []corev1.ServicePort{
				{Name: "tcp", Port: servicePort, Protocol: corev1.ProtocolTCP},
				{Name: "udp", Port: servicePort, Protocol: corev1.ProtocolUDP},
			},
			SessionAffinity: corev1.ServiceAffinityClientIP,
			SessionAffinityConfig: &corev1.SessionAffinityConfig{
				ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptr.To[int32](10)},
			},
			IPFamilyPolicy: ptr.To(corev1.IPFamilyPolicyPreferDualStack),
		},
	}
}

// helloPods starts n backends of the hello Service in cluster i, answering
// on the service port; with a subdomain they are named and hostnamed as a
// StatefulSet's pods are (hello-0, hello-1, ...).
func (e *specEnv) helloPods(i, n int, subdomain string) []*harness.Pod {
	e.t.Helper()
	var pods []*harness.Pod
	for k := range n {
		spec := harness.PodSpec{
			Name:   fmt.Sprintf("%s-%s-%d", serviceName, e.member(i).ID, k),
			Labels: map[string]string{"app": serviceName},
			Ports:  []int32{servicePort},
		}
		if subdomain != "" {
			spec.Name = fmt.Sprintf("%s-%d", serviceName, k)
			spec.Hostname = spec.Name
			spec.Subdomain = subdomain
		}
		pods = append(pods, e.addPod(i, spec))
	}
	return pods
}

// deploy creates svc in cluster i and returns it as the API server stored it.
func (e *specEnv) deploy(i int, svc *corev1.Service) *corev1.Service {
	e.t.Helper()
	svc.Namespace = e.ns
	got, err := e.member(i).Kube.CoreV1().Services(e.ns).Create(e.ctx, svc, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatalf("%s: creating Service %s/%s: %v", e.member(i).ID, e.ns, svc.Name, err)
	}
	return got
}

func helloServiceExport() *mcsv1beta1.ServiceExport {
	return &mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Name: serviceName}}
}

func (e *specEnv) export(i int, se *mcsv1beta1.ServiceExport) {
	e.t.Helper()
	se.Namespace = e.ns
	if _, err := e.member(i).MCS.MulticlusterV1beta1().ServiceExports(e.ns).Create(e.ctx, se, metav1.CreateOptions{}); err != nil {
		e.t.Fatalf("%s: creating ServiceExport %s/%s: %v", e.member(i).ID, e.ns, se.Name, err)
	}
}

func (e *specEnv) unexport(i int) {
	e.t.Helper()
	if err := e.member(i).MCS.MulticlusterV1beta1().ServiceExports(e.ns).Delete(e.ctx, serviceName, metav1.DeleteOptions{}); err != nil {
		e.t.Fatalf("%s: deleting ServiceExport %s/%s: %v", e.member(i).ID, e.ns, serviceName, err)
	}
}

// deployHello is the upstream suite's usual setup: the hello Service and
// one backend in the first cluster, exported there.
func (e *specEnv) deployHello(mutate func(*corev1.Service)) *corev1.Service {
	e.t.Helper()
	svc := helloService()
	if mutate != nil {
		mutate(svc)
	}
	e.helloPods(0, 1, "")
	got := e.deploy(0, svc)
	e.export(0, helloServiceExport())
	return got
}

// twoClusters is the upstream suite's two-cluster setup: the hello Service
// exported from the first cluster, its ServiceImport awaited there, then a
// second Service exported from the second cluster, created at least a
// second later so that the first export is the older one at the
// granularity of creation timestamps.
func (e *specEnv) twoClusters(svc1, svc2 *corev1.Service, se1, se2 *mcsv1beta1.ServiceExport) {
	e.t.Helper()
	e.helloPods(0, 1, "")
	e.deploy(0, svc1)
	e.export(0, se1)
	e.awaitImport(0, nil)
	e.awaitLaterSecond(0, se1.Name)
	e.helloPods(1, 1, "")
	e.deploy(1, svc2)
	e.export(1, se2)
}

func (e *specEnv) getImport(i int) (*mcsv1beta1.ServiceImport, error) {
	return e.member(i).MCS.MulticlusterV1beta1().ServiceImports(e.ns).Get(e.ctx, serviceName, metav1.GetOptions{})
}

// awaitImport waits until cluster i holds the hello ServiceImport and check
// (if any) accepts it; it fails the spec with check's last complaint.
func (e *specEnv) awaitImport(i int, check func(*mcsv1beta1.ServiceImport) error) *mcsv1beta1.ServiceImport {
	e.t.Helper()
	var si *mcsv1beta1.ServiceImport
	var last error
	err := wait.PollUntilContextTimeout(e.ctx, pollEvery, awaitTimeout, true, func(context.Context) (bool, error) {
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
		e.t.Fatalf("%s: ServiceImport %s/%s not as expected within %v: %v", e.member(i).ID, e.ns, serviceName, awaitTimeout, last)
	}
	return si
}

func (e *specEnv) awaitNoImport(i int, why string) {
	e.t.Helper()
	err := wait.PollUntilContextTimeout(e.ctx, pollEvery, awaitTimeout, true, func(context.Context) (bool, error) {
		_, err := e.getImport(i)
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		e.t.Fatalf("%s: %s: ServiceImport %s/%s still exists after %v", e.member(i).ID, why, e.ns, serviceName, awaitTimeout)
	}
}

// holdImport checks that cluster i keeps the ServiceImport for holdFor.
func (e *specEnv) holdImport(i int, why string) {
	e.t.Helper()
	if err := hold.For(e.ctx, holdFor, pollEvery, func(context.Context) error {
		_, err := e.getImport(i)
		return err
	}); err != nil {
		e.t.Fatalf("%s: %s: ServiceImport %s/%s: %v", e.member(i).ID, why, e.ns, serviceName, err)
	}
}

// holdNoImport checks that cluster i has no ServiceImport for holdFor.
func (e *specEnv) holdNoImport(i int, why string) {
	e.t.Helper()
	if err := hold.For(e.ctx, holdFor, pollEvery, func(context.Context) error {
		si, err := e.getImport(i)
		if err == nil {
			return fmt.Errorf("found it: %+v", si.Spec)
		}
		if !apierrors.IsNotFound(err) {
			return err
		}
		return nil
	}); err != nil {
		e.t.Fatalf("%s: %s: ServiceImport %s/%s: %v", e.member(i).ID, why, e.ns, serviceName, err)
	}
}

// awaitLaterSecond waits until the clock has left the second in which
// cluster i's ServiceExport name was created. Creation timestamps have a
// granularity of one second, and precedence goes by them: an export made
// after this is older by them, not tied.
func (e *specEnv) awaitLaterSecond(i int, name string) {
	e.t.Helper()
	se, err := e.member(i).MCS.MulticlusterV1beta1().ServiceExports(e.ns).Get(e.ctx, name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatalf("%s: getting ServiceExport %s/%s: %v", e.member(i).ID, e.ns, name, err)
	}
	created := se.CreationTimestamp.Time
	if err := wait.PollUntilContextTimeout(e.ctx, 10*time.Millisecond, awaitTimeout, true, func(context.Context) (bool, error) {
		return time.Now().Truncate(time.Second).After(created), nil
	}); err != nil {
		e.t.Fatalf("the clock did not pass %v: %v", created, err)
	}
}

// awaitCondition waits until cluster i's hello ServiceExport has the
// condition with the given status, and returns it.
func (e *specEnv) awaitCondition(i int, condType mcsv1beta1.ServiceExportConditionType, status metav1.ConditionStatus) metav1.Condition {
	e.t.Helper()
	var got *metav1.Condition
	err := wait.PollUntilContextTimeout(e.ctx, pollEvery, awaitTimeout, true, func(ctx context.Context) (bool, error) {
		se, err := e.member(i).MCS.MulticlusterV1beta1().ServiceExports(e.ns).Get(ctx, serviceName, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		got = meta.FindStatusCondition(se.Status.Conditions, string(condType))
		return got != nil && got.Status == status, nil
	})
	if err != nil {
		e.t.Fatalf("%s: ServiceExport %s/%s condition %s = %+v, want status %s within %v", e.member(i).ID, e.ns, serviceName, condType, got, status, awaitTimeout)
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
func (e *specEnv) awaitFamilies(i int) []corev1.IPFamily {
	e.t.Helper()
	return e.awaitImport(i, checkFamilies).Spec.IPFamilies
}

// mcsSlices lists cluster i's MCS EndpointSlices of the hello service: those
// with both MCS labels.
func (e *specEnv) mcsSlices(ctx context.Context, i int) ([]discoveryv1.EndpointSlice, error) {
	sel := labels.SelectorFromSet(labels.Set{mcsv1beta1.LabelServiceName: serviceName})
	list, err := e.member(i).Kube.DiscoveryV1().EndpointSlices(e.ns).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
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
func (e *specEnv) awaitMCSSlice(i int, at discoveryv1.AddressType, check func(*discoveryv1.EndpointSlice) error) *discoveryv1.EndpointSlice {
	e.t.Helper()
	var found *discoveryv1.EndpointSlice
	last := errors.New("no MCS EndpointSlice (with both " + mcsv1beta1.LabelServiceName + " and " + mcsv1beta1.LabelSourceCluster + ") with endpoints")
	err := wait.PollUntilContextTimeout(e.ctx, pollEvery, awaitTimeout, true, func(ctx context.Context) (bool, error) {
		list, err := e.mcsSlices(ctx, i)
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
		e.t.Fatalf("%s: %s MCS EndpointSlice of %s/%s not as expected within %v: %v", e.member(i).ID, at, e.ns, serviceName, awaitTimeout, last)
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
func (e *specEnv) awaitEndpoints(i int, at discoveryv1.AddressType, want int) []endpoint {
	e.t.Helper()
	var eps []endpoint
	err := wait.PollUntilContextTimeout(e.ctx, pollEvery, awaitTimeout, true, func(ctx context.Context) (bool, error) {
		sel := labels.SelectorFromSet(labels.Set{discoveryv1.LabelServiceName: serviceName})
		list, err := e.member(i).Kube.DiscoveryV1().EndpointSlices(e.ns).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
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
		e.t.Fatalf("%s: core EndpointSlices of %s/%s list %v, want %d ready endpoints", e.member(i).ID, e.ns, serviceName, eps, want)
	}
	return eps
}

// fqdn is the hello service's clusterset name, with any labels before it.
func (e *specEnv) fqdn(prefix ...string) string {
	return dns.Fqdn(strings.Join(append(prefix, serviceName, e.ns, "svc", zone), "."))
}

// query asks cluster i's mcsd DNS server from inside that cluster's request
// pod, over network ("udp" or "tcp").
func (e *specEnv) query(i int, network, name string, qtype uint16) (*dns.Msg, error) {
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), qtype)
	var resp *dns.Msg
	err := e.requests[i].NS.Do(func() error {
		c := &dns.Client{Net: network, Timeout: 2 * time.Second}
		var err error
		resp, _, err = c.Exchange(m, e.s.daemons[i].DNS.String())
		return err
	})
	return resp, err
}

// addresses are the A/AAAA answers of a response, sorted.
func addresses(m *dns.Msg) []string {
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

// clusterDNSOf returns cluster i's own DNS, CoreDNS with the shipped
// snippet forwarding the clusterset zones to the mcsd of the request pod's
// node, starting it on first use.
func (e *specEnv) clusterDNSOf(i int) *clusterDNS {
	e.t.Helper()
	if c := e.clusterDNS[i]; c != nil {
		return c
	}
	c := startClusterDNS(e.root, e.s.cs, e.member(i), e.s.nodes[i], e.s.daemons[i])
	e.clusterDNS[i] = c
	return c
}

// startClusterDNS starts every cluster's own DNS for the spec, before its
// subtests of each IP family ask it.
func (e *specEnv) startClusterDNS() {
	e.t.Helper()
	for i := range e.s.members {
		e.clusterDNSOf(i)
	}
}

// awaitAnswer asks cluster i's DNS over UDP and TCP, both mcsd's server
// from a pod and the cluster's own DNS (CoreDNS, through the shipped
// snippet), until check accepts every answer, and fails the spec with
// check's last complaint otherwise.
func (e *specEnv) awaitAnswer(i int, name string, qtype uint16, check func(*dns.Msg) error) {
	e.t.Helper()
	cdns := e.clusterDNSOf(i)
	var last error
	err := wait.PollUntilContextTimeout(e.ctx, 200*time.Millisecond, awaitTimeout, true, func(context.Context) (bool, error) {
		for _, network := range []string{"udp", "tcp"} {
			for _, via := range []string{"mcsd", "the cluster DNS"} {
				var m *dns.Msg
				var err error
				if via == "mcsd" {
					m, err = e.query(i, network, name, qtype)
				} else {
					m, err = cdns.queryOver(network, name, qtype)
				}
				if err != nil {
					last = fmt.Errorf("asking %s over %s: %w", via, network, err)
					return false, nil
				}
				if err := check(m); err != nil {
					last = fmt.Errorf("asking %s over %s: %w (answer: %v)", via, network, err, m.Answer)
					return false, nil
				}
			}
		}
		return true, nil
	})
	if err != nil {
		e.t.Fatalf("%s: DNS %s %s from a pod, not as expected within %v: %v", e.member(i).ID, dns.TypeToString[qtype], name, awaitTimeout, last)
	}
}

// resolve looks the hello service's clusterset name up in cluster i, as a
// pod's resolver would, for an address of family f (an A or AAAA query),
// and returns its first address.
func (e *specEnv) resolve(i int, f corev1.IPFamily) (netip.Addr, error) {
	qtype := recordType(f)
	m, err := e.query(i, "udp", e.fqdn(), qtype)
	if err != nil {
		return netip.Addr{}, err
	}
	if m.Rcode != dns.RcodeSuccess {
		return netip.Addr{}, fmt.Errorf("%s %s %s", e.fqdn(), dns.TypeToString[qtype], dns.RcodeToString[m.Rcode])
	}
	addrs := addresses(m)
	if len(addrs) == 0 {
		return netip.Addr{}, fmt.Errorf("%s has no %s record", e.fqdn(), dns.TypeToString[qtype])
	}
	a, err := netip.ParseAddr(addrs[0])
	if err == nil && family(a) != f {
		err = fmt.Errorf("%s %s answered %s", e.fqdn(), dns.TypeToString[qtype], a)
	}
	return a, err
}

// ask connects from cluster i's request pod to the hello service's
// clusterset name on port, over family f, through DNS and the proxier,
// and returns which backend answered.
func (e *specEnv) ask(i int, f corev1.IPFamily, network string, port int) (echo.Identity, error) {
	vip, err := e.resolve(i, f)
	if err != nil {
		return echo.Identity{}, err
	}
	return e.connect(i, network, vip, port)
}

// connect asks the backend behind vip:port from cluster i's request pod.
func (e *specEnv) connect(i int, network string, vip netip.Addr, port int) (echo.Identity, error) {
	ctx, cancel := context.WithTimeout(e.ctx, 2*time.Second)
	defer cancel()
	return e.requests[i].Ask(ctx, network, netip.AddrPortFrom(vip, uint16(port)).String())
}

// awaitOnly connects from every cluster to the hello service's clusterset
// name on port, over family f and each of networks ("tcp", "udp"), until a
// backend in want answers each, then asks at least n more times and for
// at least holdFor, taking the networks in turn: every answer must come
// from a pod in want, reached at its address of family f.
func (e *specEnv) awaitOnly(f corev1.IPFamily, networks []string, port int, want []*harness.Pod, n int) {
	e.t.Helper()
	ok := map[string]bool{}
	var names []string
	for _, p := range want {
		ip, has := p.IPOf(f)
		if !has {
			e.t.Fatalf("%s/%s has no %s address", p.Node.Cluster.Name, p.Name, f)
		}
		ok[ip.String()] = true
		names = append(names, p.Node.Cluster.Name+"/"+p.Name)
	}
	for i := range e.s.members {
		for _, network := range networks {
			var last error
			// When the name does not resolve yet, the first connection
			// after it does is made at once and must succeed: a name
			// mcsd's DNS hands out is already reachable. Later failures
			// (a port or endpoints still on their way) are retried.
			first, strict := true, false
			err := wait.PollUntilContextTimeout(e.ctx, 200*time.Millisecond, awaitTimeout, true, func(context.Context) (bool, error) {
				vip, err := e.resolve(i, f)
				if err != nil {
					strict = strict || first
					first = false
					last = err
					return false, nil
				}
				first = false
				id, err := e.connect(i, network, vip, port)
				if err != nil && strict {
					return false, fmt.Errorf("%s resolved to %s, and the %s connection made at once failed: %w", e.fqdn(), vip, network, err)
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
				e.t.Fatalf("%s: %s:%d over %s/%s never answered by %v within %v: %v", e.member(i).ID, e.fqdn(), port, f, network, names, awaitTimeout, last)
			}
		}
		// The proxier applies what the importer writes a moment later:
		// keep asking for holdFor, not only n times, so that a backend
		// that must not answer has the time to show.
		end := time.Now().Add(holdFor)
		for k := 0; k < n || time.Now().Before(end); k++ {
			network := networks[k%len(networks)]
			id, err := e.ask(i, f, network, port)
			if err != nil {
				e.t.Fatalf("%s: connection %d to %s:%d over %s/%s: %v", e.member(i).ID, k+1, e.fqdn(), port, f, network, err)
			}
			if !ok[id.IP] {
				e.t.Fatalf("%s: connection %d to %s:%d over %s/%s answered by %s, want only %v", e.member(i).ID, k+1, e.fqdn(), port, f, network, id, names)
			}
			time.Sleep(pollEvery)
		}
	}
}

// noConnect checks that n connections from every cluster to the hello
// service's clusterset name on port, over family f and each of networks,
// reach nobody.
func (e *specEnv) noConnect(f corev1.IPFamily, networks []string, port int, n int) {
	e.t.Helper()
	for i := range e.s.members {
		for k := range n {
			network := networks[k%len(networks)]
			if id, err := e.ask(i, f, network, port); err == nil {
				e.t.Fatalf("%s: connection %d to %s:%d over %s/%s answered by %s, want no answer", e.member(i).ID, k+1, e.fqdn(), port, f, network, id)
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
