package dns

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
)

// Builders of the objects the Index is fed with.

func port(name string, proto corev1.Protocol, number int32) mcsv1beta1.ServicePort {
	return mcsv1beta1.ServicePort{Name: name, Protocol: proto, Port: number}
}

func clusterSetImport(namespace, name string, ips []string, ports ...mcsv1beta1.ServicePort) *mcsv1beta1.ServiceImport {
	return &mcsv1beta1.ServiceImport{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec:       mcsv1beta1.ServiceImportSpec{Type: mcsv1beta1.ClusterSetIP, IPs: ips, Ports: ports},
	}
}

func headlessImport(namespace, name string, ports ...mcsv1beta1.ServicePort) *mcsv1beta1.ServiceImport {
	return &mcsv1beta1.ServiceImport{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec:       mcsv1beta1.ServiceImportSpec{Type: mcsv1beta1.Headless, Ports: ports},
	}
}

// endpoint is a ready endpoint; hostname may be empty.
func endpoint(hostname string, addrs ...string) discoveryv1.Endpoint {
	ep := discoveryv1.Endpoint{Addresses: addrs, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}
	if hostname != "" {
		ep.Hostname = ptr.To(hostname)
	}
	return ep
}

func notReady(ep discoveryv1.Endpoint) discoveryv1.Endpoint {
	ep.Conditions.Ready = ptr.To(false)
	return ep
}

// mcsSlice is an MCS EndpointSlice of a service from a cluster. Its address
// type follows its first address.
func mcsSlice(namespace, name, service, cluster string, eps ...discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
	at := discoveryv1.AddressTypeIPv4
	if len(eps) > 0 && len(eps[0].Addresses) > 0 && strings.Contains(eps[0].Addresses[0], ":") {
		at = discoveryv1.AddressTypeIPv6
	}
	return &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: namespace,
			Name:      name,
			Labels: map[string]string{
				mcsv1beta1.LabelServiceName:   service,
				mcsv1beta1.LabelSourceCluster: cluster,
			},
		},
		AddressType: at,
		Endpoints:   eps,
	}
}

// testServer is a Server listening on loopback UDP and TCP.
type testServer struct {
	*Server
	udp, tcp string
}

// startServer serves idx on 127.0.0.1 until the test ends. cfg.Index is
// set to idx.
func startServer(t testing.TB, idx *Index, cfg Config) *testServer {
	t.Helper()
	return startServerOn(t, idx, cfg, "127.0.0.1")
}

// startServerOn is startServer on another address, such as ::1.
func startServerOn(t testing.TB, idx *Index, cfg Config, host string) *testServer {
	t.Helper()
	cfg.Index = idx
	if cfg.Registerer == nil {
		cfg.Registerer = prometheus.NewRegistry()
	}
	if cfg.Logger.GetSink() == nil {
		cfg.Logger = ktesting.NewLogger(t, ktesting.NewConfig())
	}
	srv, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	pc, err := net.ListenPacket("udp", net.JoinHostPort(host, "0"))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		t.Fatal(err)
	}
	serveUntilCleanup(t, srv, pc, ln)
	return &testServer{Server: srv, udp: pc.LocalAddr().String(), tcp: ln.Addr().String()}
}

// serveUntilCleanup serves on pc and ln until the test ends.
func serveUntilCleanup(t testing.TB, srv *Server, pc net.PacketConn, ln net.Listener) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, pc, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
}

// exchange sends m over network ("udp" or "tcp") and returns the answer.
// The client's deadline only guards against a hung test; no assertion
// depends on how fast an answer comes.
func (ts *testServer) exchange(t testing.TB, network string, m *dns.Msg) *dns.Msg {
	t.Helper()
	addr := ts.udp
	if network == "tcp" {
		addr = ts.tcp
	}
	c := &dns.Client{Net: network, Timeout: time.Minute}
	if network == "udp" {
		// Accept whatever size the server sends; the server must obey the
		// size the query advertised.
		c.UDPSize = dns.MaxMsgSize
	}
	r, _, err := c.Exchange(m, addr)
	if err != nil {
		t.Fatalf("%s query %v: %v", network, m.Question, err)
	}
	return r
}

func query(name string, qtype uint16) *dns.Msg {
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), qtype)
	return m
}

// rrStrings renders records in presentation format for comparison, sorted
// unless ordered, with SOA serials zeroed (they count index changes).
func rrStrings(rrs []dns.RR, ordered bool) []string {
	var out []string
	for _, rr := range rrs {
		if rr.Header().Rrtype == dns.TypeOPT {
			continue
		}
		if soa, ok := rr.(*dns.SOA); ok {
			c := *soa
			c.Serial = 0
			rr = &c
		}
		out = append(out, rr.String())
	}
	if !ordered {
		slices.Sort(out)
	}
	return out
}

// mustRRs parses records written in zone file format; names are relative
// to clusterset.local unless they end in a dot.
func mustRRs(t testing.TB, lines ...string) []dns.RR {
	t.Helper()
	var out []dns.RR
	for _, l := range lines {
		rr, err := dns.NewRR("$ORIGIN clusterset.local.\n$TTL 5\n" + l)
		if err != nil {
			t.Fatalf("bad test record %q: %v", l, err)
		}
		out = append(out, rr)
	}
	return out
}

func addrs(ss ...string) []netip.Addr {
	var out []netip.Addr
	for _, s := range ss {
		out = append(out, netip.MustParseAddr(s))
	}
	return out
}

func rcodeName(rc int) string {
	if s, ok := dns.RcodeToString[rc]; ok {
		return s
	}
	return fmt.Sprint(rc)
}
