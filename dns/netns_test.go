package dns

import (
	"context"
	"net"
	"net/netip"
	"strconv"
	"testing"
	"time"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2/ktesting"

	"github.com/mcsd-io/mcsd/test/lib/netns"
	"github.com/mcsd-io/mcsd/test/lib/testenv"
	"github.com/mcsd-io/mcsd/vipalloc"
)

// exchangeIn sends m from inside ns over network to address and returns the
// answer. The deadline only guards against a hung test: an answer that
// never comes fails it.
func exchangeIn(t *testing.T, ns *netns.NS, network, address string, m *dns.Msg) (*dns.Msg, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
	defer cancel()
	c, err := ns.Dial(ctx, network, address)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	co := &dns.Conn{Conn: c, UDPSize: dns.MaxMsgSize}
	_ = co.SetDeadline(time.Now().Add(3 * time.Second))
	if err := co.WriteMsg(m); err != nil {
		return nil, err
	}
	return co.ReadMsg()
}

// TestServeIPv6ClientsInANamespace serves as mcsd does (ListenUDP and a TCP
// listener on the wildcard address, inside the node's network namespace) to
// pods that reach the server over IPv6: at its address, at a second address
// of the same interface, and at its link-local address, the same on two
// links. Whichever address a query went to, the answer must come from it,
// and through the link it came in by, over UDP as over TCP, from the fast
// path as from the full one. IPv4 clients of the same dual-stack socket,
// and of an IPv4 one, are checked the same way.
func TestServeIPv6ClientsInANamespace(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequireCommands(t, "ip", "sysctl")
	node := netns.ForTest(t, "mcsdd", "node")
	pod := netns.ForTest(t, "mcsdd", "pod")
	other := netns.ForTest(t, "mcsdd", "other")
	if err := netns.Veth(node, "vpod", pod, "eth0"); err != nil {
		t.Fatal(err)
	}
	if err := netns.Veth(node, "vother", other, "eth0"); err != nil {
		t.Fatal(err)
	}
	for _, cmd := range [][]string{
		{"addr", "add", "fd53::53/64", "dev", "vpod", "nodad"},
		{"addr", "add", "fd53::54/64", "dev", "vpod", "nodad"},
		{"addr", "add", "fe80::53/64", "dev", "vpod", "nodad"},
		{"addr", "add", "10.53.0.53/24", "dev", "vpod"},
		{"addr", "add", "10.53.0.54/24", "dev", "vpod"},
		// The other link has the same link-local addresses: only the zone
		// tells the links apart.
		{"addr", "add", "fe80::53/64", "dev", "vother", "nodad"},
	} {
		if _, err := node.IP(cmd...); err != nil {
			t.Fatal(err)
		}
	}
	for _, cmd := range [][]string{
		{"addr", "add", "fd53::2/64", "dev", "eth0", "nodad"},
		{"addr", "add", "fe80::2/64", "dev", "eth0", "nodad"},
		{"addr", "add", "10.53.0.2/24", "dev", "eth0"},
	} {
		if _, err := pod.IP(cmd...); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := other.IP("addr", "add", "fe80::2/64", "dev", "eth0", "nodad"); err != nil {
		t.Fatal(err)
	}

	vip6 := vipalloc.DefaultClusterSetCIDRv6.Addr().As16()
	vip6[15] = 10
	vip := netip.AddrFrom16(vip6).String()
	// serve serves, on listen inside the node, an index of its own (the
	// fast path packs its answers for one server), and returns the port.
	serve := func(listen string) string {
		t.Helper()
		idx := NewIndex(ktesting.NewLogger(t, ktesting.NewConfig()))
		tcp := corev1.ProtocolTCP
		idx.setImport(clusterSetImport("prod", "web", []string{"243.0.0.10", vip}, port("http", tcp, 80)))
		idx.setImport(headlessImport("prod", "db", port("pg", tcp, 5432)))
		idx.setSlice(mcsSlice("prod", "db-c1", "db", "c1", endpoint("db-0", "fd64:2::2"), endpoint("", "fd64:3::2")))
		idx.markSynced()
		srv, err := New(Config{
			Index:        idx,
			LocalCluster: localCluster,
			ReverseCIDRs: []netip.Prefix{vipalloc.DefaultClusterSetCIDRv4, vipalloc.DefaultClusterSetCIDRv6, netip.MustParsePrefix("fd64::/16")},
			Logger:       ktesting.NewLogger(t, ktesting.NewConfig()),
		})
		if err != nil {
			t.Fatal(err)
		}
		var pcs []net.PacketConn
		var ln net.Listener
		if err := node.Do(func() (err error) {
			if pcs, err = ListenUDP(t.Context(), listen); err != nil {
				return err
			}
			ln, err = net.Listen("tcp", pcs[0].LocalAddr().String())
			return err
		}); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- srv.ServeUDP(ctx, pcs, ln) }()
		t.Cleanup(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("ServeUDP: %v", err)
			}
		})
		_, port, err := net.SplitHostPort(pcs[0].LocalAddr().String())
		if err != nil {
			t.Fatal(err)
		}
		return port
	}

	ptrVIP, _ := dns.ReverseAddr(vip)
	ptrDB0, _ := dns.ReverseAddr("fd64:2::2")
	ptrDashed, _ := dns.ReverseAddr("fd64:3::2")
	rows := []row{
		{name: "ClusterSetIP AAAA", q: "web.prod.svc", qtype: dns.TypeAAAA, answer: []string{"web.prod.svc 5 IN AAAA " + vip}},
		{name: "ClusterSetIP A", q: "web.prod.svc", qtype: dns.TypeA, answer: []string{"web.prod.svc 5 IN A 243.0.0.10"}},
		{name: "ClusterSetIP ANY (the full path)", q: "web.prod.svc", qtype: dns.TypeANY,
			answer: []string{"web.prod.svc 5 IN A 243.0.0.10", "web.prod.svc 5 IN AAAA " + vip}},
		{name: "headless AAAA", q: "db.prod.svc", qtype: dns.TypeAAAA,
			answer: []string{"db.prod.svc 5 IN AAAA fd64:2::2", "db.prod.svc 5 IN AAAA fd64:3::2"}},
		{name: "headless hostname AAAA", q: "db-0.c1.db.prod.svc", qtype: dns.TypeAAAA,
			answer: []string{"db-0.c1.db.prod.svc 5 IN AAAA fd64:2::2"}},
		{name: "PTR of the IPv6 ClusterSetIP", q: ptrVIP, qtype: dns.TypePTR, answer: []string{ptrVIP + " 5 IN PTR web.prod.svc"}},
		{name: "PTR of an IPv6 headless endpoint", q: ptrDB0, qtype: dns.TypePTR, answer: []string{ptrDB0 + " 5 IN PTR db-0.c1.db.prod.svc"}},
		{name: "PTR of an IPv6 headless endpoint without hostname", q: ptrDashed, qtype: dns.TypePTR,
			answer: []string{ptrDashed + " 5 IN PTR fd64-3--2.c1.db.prod.svc"}},
		{name: "another zone (the full path)", q: "example.com.", qtype: dns.TypeAAAA, rcode: dns.RcodeRefused},
	}
	ask := func(t *testing.T, from *netns.NS, address string) {
		for _, network := range []string{"udp", "tcp"} {
			t.Run(network, func(t *testing.T) {
				for _, r := range rows {
					t.Run(r.name, func(t *testing.T) {
						resp, err := exchangeIn(t, from, network, address, query(r.qname(), r.qtype))
						if err != nil {
							t.Fatalf("%s %s to %s: %v", r.qname(), dns.TypeToString[r.qtype], address, err)
						}
						checkAnswer(t, r, resp)
					})
				}
			})
		}
	}

	// linkLocal is the node's link-local address as seen from ns. The zone
	// is the interface's index: Go's cache of interface names is one for
	// the process, whatever namespace a thread is in.
	linkLocal := func(ns *netns.NS) string {
		t.Helper()
		var ifi *net.Interface
		if err := ns.Do(func() (err error) { ifi, err = net.InterfaceByName("eth0"); return err }); err != nil {
			t.Fatal(err)
		}
		return "fe80::53%" + strconv.Itoa(ifi.Index)
	}

	t.Run("dual-stack socket", func(t *testing.T) {
		port := serve(":0")
		for _, server := range []string{"fd53::53", "fd53::54", "10.53.0.53", "10.53.0.54"} {
			t.Run(server, func(t *testing.T) { ask(t, pod, net.JoinHostPort(server, port)) })
		}
		t.Run("fe80::53 from one link", func(t *testing.T) {
			ask(t, pod, net.JoinHostPort(linkLocal(pod), port))
		})
		t.Run("fe80::53 from the other link", func(t *testing.T) {
			ask(t, other, net.JoinHostPort(linkLocal(other), port))
		})
	})
	t.Run("IPv4 socket", func(t *testing.T) {
		port := serve("0.0.0.0:0")
		for _, server := range []string{"10.53.0.53", "10.53.0.54"} {
			t.Run(server, func(t *testing.T) { ask(t, pod, net.JoinHostPort(server, port)) })
		}
	})
}
