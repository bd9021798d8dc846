package dns

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/klog/v2/ktesting"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
	mcsinformers "sigs.k8s.io/mcs-api/pkg/client/informers/externalversions"

	"github.com/mcsd-io/mcsd/mcsslice"
	"github.com/mcsd-io/mcsd/test/lib/harness"
)

// TestServeFromAPIServer runs the Index on informers of a real API server
// and checks that what is created, changed and deleted through the API is
// what the server answers, over UDP and TCP, on IPv4 and IPv6 loopback (an
// Index and a server each, on the same informers: an Index packs its fast
// path's answers for one server).
func TestServeFromAPIServer(t *testing.T) {
	cs := harness.Start(t, harness.Options{Clusters: 1})
	member := cs.Members[0]
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)

	logger := ktesting.NewLogger(t, ktesting.NewConfig())
	mcsFactory := mcsinformers.NewSharedInformerFactory(member.MCS, 0)
	kubeFactory := informers.NewSharedInformerFactoryWithOptions(member.Kube, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = mcsslice.Selector }))
	var indexes []*Index
	var ts []*testServer
	for _, lo := range loopbacks {
		pc, err := net.ListenPacket("udp", net.JoinHostPort(lo.host, "0"))
		if err != nil {
			t.Logf("no %s loopback: %v", lo.name, err)
			continue
		}
		_ = pc.Close()
		idx := NewIndex(logger)
		runDone := make(chan error, 1)
		imports, slices := mcsFactory.Multicluster().V1beta1().ServiceImports().Informer(), kubeFactory.Discovery().V1().EndpointSlices().Informer()
		go func() { runDone <- idx.Run(ctx, imports, slices) }()
		t.Cleanup(func() {
			cancel()
			if err := <-runDone; err != nil {
				t.Errorf("Index.Run: %v", err)
			}
		})
		indexes = append(indexes, idx)
		ts = append(ts, startServerOn(t, idx, Config{Logger: logger}, lo.host))
	}
	mcsFactory.Start(ctx.Done())
	kubeFactory.Start(ctx.Done())

	const ns = "prod"
	kube, mcs := member.Kube, member.MCS.MulticlusterV1beta1()
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tcp := corev1.ProtocolTCP

	// Until the informers have listed everything, every answer is SERVFAIL;
	// then the empty zone answers.
	eventually(t, ts, row{name: "the zone answers once synced", q: "dns-version", qtype: dns.TypeTXT,
		answer: []string{`dns-version 5 IN TXT "1.1.0"`}})

	// Create.
	web := clusterSetImport(ns, "web", []string{"243.0.0.10", "fd00:243::10"}, port("http", tcp, 80))
	if _, err := mcs.ServiceImports(ns).Create(ctx, web, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := mcs.ServiceImports(ns).Create(ctx, headlessImport(ns, "db", port("pg", tcp, 5432)), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	dbC1 := withPorts(mcsSlice(ns, "db-c1", "db", "c1",
		endpoint("db-0", "10.1.0.1"),
		endpoint("", "10.1.0.2"),
		notReady(endpoint("db-9", "10.1.0.9"))), 5432)
	dbC2 := withPorts(mcsSlice(ns, "db-c2", "db", "c2", endpoint("db-0", "fd00:10:2::1")), 5432)
	// A slice that is not an MCS slice: the informer's selector leaves it
	// out, and it must not show up in any answer.
	plain := withPorts(mcsSlice(ns, "db-local", "db", "c1", endpoint("db-7", "10.1.0.7")), 5432)
	delete(plain.Labels, mcsv1beta1.LabelSourceCluster)
	for _, es := range []*discoveryv1.EndpointSlice{dbC1, dbC2, plain} {
		if _, err := kube.DiscoveryV1().EndpointSlices(ns).Create(ctx, es, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	ptrWeb6, _ := dns.ReverseAddr("fd00:243::10")
	ptrDB6, _ := dns.ReverseAddr("fd00:10:2::1")
	eventually(t, ts,
		row{name: "ClusterSetIP A", q: "web.prod.svc", qtype: dns.TypeA, answer: []string{"web.prod.svc 5 IN A 243.0.0.10"}},
		row{name: "ClusterSetIP AAAA", q: "web.prod.svc", qtype: dns.TypeAAAA, answer: []string{"web.prod.svc 5 IN AAAA fd00:243::10"}},
		row{name: "ClusterSetIP SRV", q: "_http._tcp.web.prod.svc", qtype: dns.TypeSRV,
			answer: []string{"_http._tcp.web.prod.svc 5 IN SRV 0 100 80 web.prod.svc"}},
		row{name: "ClusterSetIP PTR", q: "10.0.0.243.in-addr.arpa.", qtype: dns.TypePTR,
			answer: []string{"10.0.0.243.in-addr.arpa. 5 IN PTR web.prod.svc"}},
		row{name: "ClusterSetIP IPv6 PTR", q: ptrWeb6, qtype: dns.TypePTR, answer: []string{ptrWeb6 + " 5 IN PTR web.prod.svc"}},
		row{name: "headless A: ready endpoints only", q: "db.prod.svc", qtype: dns.TypeA,
			answer: []string{"db.prod.svc 5 IN A 10.1.0.1", "db.prod.svc 5 IN A 10.1.0.2"}},
		row{name: "headless AAAA", q: "db.prod.svc", qtype: dns.TypeAAAA, answer: []string{"db.prod.svc 5 IN AAAA fd00:10:2::1"}},
		row{name: "headless hostname", q: "db-0.c1.db.prod.svc", qtype: dns.TypeA, answer: []string{"db-0.c1.db.prod.svc 5 IN A 10.1.0.1"}},
		row{name: "headless dashed hostname", q: "10-1-0-2.c1.db.prod.svc", qtype: dns.TypeA,
			answer: []string{"10-1-0-2.c1.db.prod.svc 5 IN A 10.1.0.2"}},
		row{name: "headless hostname in another cluster", q: "db-0.c2.db.prod.svc", qtype: dns.TypeAAAA,
			answer: []string{"db-0.c2.db.prod.svc 5 IN AAAA fd00:10:2::1"}},
		row{name: "headless SRV", q: "_pg._tcp.db.prod.svc", qtype: dns.TypeSRV, answer: []string{
			"_pg._tcp.db.prod.svc 5 IN SRV 0 33 5432 db-0.c1.db.prod.svc",
			"_pg._tcp.db.prod.svc 5 IN SRV 0 33 5432 10-1-0-2.c1.db.prod.svc",
			"_pg._tcp.db.prod.svc 5 IN SRV 0 33 5432 db-0.c2.db.prod.svc"}},
		row{name: "headless PTR", q: "1.0.1.10.in-addr.arpa.", qtype: dns.TypePTR,
			answer: []string{"1.0.1.10.in-addr.arpa. 5 IN PTR db-0.c1.db.prod.svc"}},
		row{name: "headless IPv6 PTR", q: ptrDB6, qtype: dns.TypePTR, answer: []string{ptrDB6 + " 5 IN PTR db-0.c2.db.prod.svc"}},
		row{name: "no name for a not ready endpoint", q: "db-9.c1.db.prod.svc", qtype: dns.TypeA, rcode: dns.RcodeNameError},
		row{name: "no name for an endpoint of a slice that is not an MCS slice", q: "db-7.c1.db.prod.svc", qtype: dns.TypeA, rcode: dns.RcodeNameError},
	)

	// Change.
	web, err := mcs.ServiceImports(ns).Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	web.Spec.IPs = []string{"243.0.0.11"}
	web.Spec.Ports = append(web.Spec.Ports, port("https", tcp, 443))
	if _, err := mcs.ServiceImports(ns).Update(ctx, web, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	dbC1, err = kube.DiscoveryV1().EndpointSlices(ns).Get(ctx, "db-c1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	dbC1.Endpoints[0] = notReady(dbC1.Endpoints[0])
	dbC1.Endpoints[2] = endpoint("db-9", "10.1.0.9")
	if _, err := kube.DiscoveryV1().EndpointSlices(ns).Update(ctx, dbC1, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, ts,
		row{name: "the new ClusterSetIP", q: "web.prod.svc", qtype: dns.TypeA, answer: []string{"web.prod.svc 5 IN A 243.0.0.11"}},
		row{name: "the IPv6 ClusterSetIP is gone", q: "web.prod.svc", qtype: dns.TypeAAAA},
		row{name: "the new ClusterSetIP's PTR", q: "11.0.0.243.in-addr.arpa.", qtype: dns.TypePTR,
			answer: []string{"11.0.0.243.in-addr.arpa. 5 IN PTR web.prod.svc"}},
		row{name: "the old ClusterSetIP's PTR is gone", q: "10.0.0.243.in-addr.arpa.", qtype: dns.TypePTR, rcode: dns.RcodeRefused},
		row{name: "the new port's SRV", q: "_https._tcp.web.prod.svc", qtype: dns.TypeSRV,
			answer: []string{"_https._tcp.web.prod.svc 5 IN SRV 0 100 443 web.prod.svc"}},
		row{name: "bare-name SRV has both ports", q: "web.prod.svc", qtype: dns.TypeSRV, answer: []string{
			"web.prod.svc 5 IN SRV 0 50 80 web.prod.svc", "web.prod.svc 5 IN SRV 0 50 443 web.prod.svc"}},
		row{name: "headless A follows readiness", q: "db.prod.svc", qtype: dns.TypeA,
			answer: []string{"db.prod.svc 5 IN A 10.1.0.2", "db.prod.svc 5 IN A 10.1.0.9"}},
		row{name: "an endpoint that is no longer ready has no name", q: "db-0.c1.db.prod.svc", qtype: dns.TypeA, rcode: dns.RcodeNameError},
		row{name: "nor a PTR", q: "1.0.1.10.in-addr.arpa.", qtype: dns.TypePTR, rcode: dns.RcodeRefused},
		row{name: "an endpoint that became ready has a name", q: "db-9.c1.db.prod.svc", qtype: dns.TypeA,
			answer: []string{"db-9.c1.db.prod.svc 5 IN A 10.1.0.9"}},
	)

	// Delete.
	if err := mcs.ServiceImports(ns).Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"db-c1", "db-c2"} {
		if err := kube.DiscoveryV1().EndpointSlices(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, ts,
		row{name: "a deleted ServiceImport", q: "web.prod.svc", qtype: dns.TypeA, rcode: dns.RcodeNameError},
		row{name: "its PTR", q: "11.0.0.243.in-addr.arpa.", qtype: dns.TypePTR, rcode: dns.RcodeRefused},
		row{name: "headless without slices has no ready endpoints", q: "db.prod.svc", qtype: dns.TypeA, rcode: dns.RcodeNameError},
		row{name: "nor hostnames", q: "db-0.c2.db.prod.svc", qtype: dns.TypeAAAA, rcode: dns.RcodeNameError},
		row{name: "a namespace without services", q: "prod.svc", qtype: dns.TypeA, rcode: dns.RcodeNameError},
	)
	if err := mcs.ServiceImports(ns).Delete(ctx, "db", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, idx := range indexes {
		if err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
			services, endpoints := idx.Size()
			return services == 0 && endpoints == 0, nil
		}); err != nil {
			services, endpoints := idx.Size()
			t.Errorf("index still holds %d services and %d endpoints after every object was deleted", services, endpoints)
		}
	}
}

// withPorts gives the slice TCP ports, as exporters copy them from the
// exported Service.
func withPorts(es *discoveryv1.EndpointSlice, ports ...int32) *discoveryv1.EndpointSlice {
	for _, p := range ports {
		es.Ports = append(es.Ports, discoveryv1.EndpointPort{Port: &p})
	}
	return es
}

// eventually waits until every row is answered as it wants by each server
// over UDP and TCP, polling: informers deliver changes a moment after the
// API server accepts them. The timeout only bounds a test that would never
// pass; it is not a latency assertion.
func eventually(t *testing.T, servers []*testServer, rows ...row) {
	t.Helper()
	for _, ts := range servers {
		for _, network := range []string{"udp", "tcp"} {
			for _, r := range rows {
				var last []string
				err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
					m := query(r.qname(), r.qtype)
					last = answerProblems(t, r, ts.exchange(t, network, m))
					return len(last) == 0, nil
				})
				if err != nil {
					t.Errorf("%s over %s to %s (%s %s): %s", r.name, network, ts.udp, r.qname(), dns.TypeToString[r.qtype], strings.Join(last, "; "))
				}
			}
		}
	}
}
