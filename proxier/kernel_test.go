package proxier

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	clocktesting "k8s.io/utils/clock/testing"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/mcsd-io/mcsd/proxier/netfilter"
	"github.com/mcsd-io/mcsd/test/lib/echo"
	"github.com/mcsd-io/mcsd/test/lib/netns"
	"github.com/mcsd-io/mcsd/test/lib/testenv"
	"github.com/mcsd-io/mcsd/vipalloc"
)

// newNode creates the namespace of a node: it forwards, and its default
// route leads to an uplink (a veth to a namespace that does not forward), so
// that packets to a ClusterSetIP that no rule DNATs are forwarded, and reach
// the filter rules, as on a real node.
func newNode(t testing.TB) *netns.NS {
	t.Helper()
	node := netns.ForTest(t, "mcsdp", "node")
	uplink := netns.ForTest(t, "mcsdp", "uplink")
	if err := netns.Veth(node, "up0", uplink, "eth0"); err != nil {
		t.Fatal(err)
	}
	for _, cmd := range [][]string{
		{"addr", "add", "192.0.2.254/24", "dev", "eth0"},
		{"addr", "add", "2001:db8::fe/64", "dev", "eth0", "nodad"},
	} {
		if _, err := uplink.IP(cmd...); err != nil {
			t.Fatal(err)
		}
	}
	for _, cmd := range [][]string{
		{"addr", "add", "192.0.2.1/24", "dev", "up0"},
		{"addr", "add", "2001:db8::1/64", "dev", "up0", "nodad"},
		{"route", "add", "default", "via", "192.0.2.254"},
		{"-6", "route", "add", "default", "via", "2001:db8::fe"},
	} {
		if _, err := node.IP(cmd...); err != nil {
			t.Fatal(err)
		}
	}
	for _, kv := range [][2]string{
		{"net.ipv4.ip_forward", "1"},
		{"net.ipv6.conf.all.forwarding", "1"},
		{"net.ipv4.conf.all.rp_filter", "0"},
		{"net.ipv4.conf.default.rp_filter", "0"},
	} {
		if err := node.Sysctl(kv[0], kv[1]); err != nil {
			t.Fatal(err)
		}
	}
	return node
}

// pod is a namespace routed through the node by a veth, with an echo server
// on :8080/tcp and :5353/udp and a "who are you talking to" server on
// :9000/tcp.
type pod struct {
	name      string
	cluster   string
	ns        *netns.NS
	ip, ip6   netip.Addr
	gw, gw6   netip.Addr
	endpoints []string
	// host says that this is the node itself, not a pod.
	host bool
}

// newPod plumbs a pod: addresses a.b.c.2/24 and fd<a>:<c>::2/64, its
// node-side veth a.b.c.1 and fd<a>:<c>::1.
func newPod(t testing.TB, node *netns.NS, name, cluster string, ip, ip6 string, serve bool) *pod {
	t.Helper()
	p := &pod{name: name, cluster: cluster, ns: netns.ForTest(t, "mcsdp", name),
		ip: netip.MustParseAddr(ip), ip6: netip.MustParseAddr(ip6)}
	gw4 := p.ip.As4()
	gw4[3] = 1
	p.gw = netip.AddrFrom4(gw4)
	gw6 := p.ip6.As16()
	gw6[15] = 1
	p.gw6 = netip.AddrFrom16(gw6)
	if err := netns.Veth(node, "v"+name, p.ns, "eth0"); err != nil {
		t.Fatal(err)
	}
	for _, cmd := range [][]string{
		{"addr", "add", p.gw.String() + "/24", "dev", "v" + name},
		{"addr", "add", p.gw6.String() + "/64", "dev", "v" + name, "nodad"},
	} {
		if _, err := node.IP(cmd...); err != nil {
			t.Fatal(err)
		}
	}
	for _, cmd := range [][]string{
		{"addr", "add", p.ip.String() + "/24", "dev", "eth0"},
		{"addr", "add", p.ip6.String() + "/64", "dev", "eth0", "nodad"},
		{"route", "add", "default", "via", p.gw.String()},
		{"-6", "route", "add", "default", "via", p.gw6.String()},
	} {
		if _, err := p.ns.IP(cmd...); err != nil {
			t.Fatal(err)
		}
	}
	if !serve {
		return p
	}
	tcp, err := p.ns.Listen("tcp", ":8080")
	if err != nil {
		t.Fatal(err)
	}
	udp, err := p.ns.ListenPacket("udp", ":5353")
	if err != nil {
		t.Fatal(err)
	}
	srv := echo.Serve(echo.Identity{IP: p.ip.String(), Cluster: cluster, Pod: name}, tcp, udp)
	t.Cleanup(srv.Close)
	peer, err := p.ns.Listen("tcp", ":9000")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = peer.Close() })
	go func() {
		for {
			c, err := peer.Accept()
			if err != nil {
				return
			}
			_, _ = fmt.Fprintf(c, "%s\n", c.RemoteAddr().(*net.TCPAddr).AddrPort().Addr().Unmap())
			_ = c.Close()
		}
	}()
	return p
}

// ask opens a new connection from p to address and returns who answered.
func (p *pod) ask(ctx context.Context, network, address string) (echo.Identity, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	c, err := p.ns.Dial(ctx, network, address)
	if err != nil {
		return echo.Identity{}, err
	}
	defer c.Close()
	if strings.HasPrefix(network, "udp") {
		return echo.AskUDP(ctx, c)
	}
	return echo.AskTCP(ctx, c)
}

// kernelWorld is the topology of the real-kernel tests: a node running the
// proxier, a client pod and two backend pods in each of two clusters, and a
// host outside the pod network.
type kernelWorld struct {
	node             *netns.NS
	client, external *pod
	e1, e2, w1, w2   *pod
	proxier          *DualStack
	podsByName       map[string]*pod
	// clock is the proxiers' clock: time passes only when a test steps it.
	clock *clocktesting.FakeClock
}

func newKernelWorld(t *testing.T, edit ...func(*Config)) *kernelWorld {
	t.Helper()
	w := &kernelWorld{node: newNode(t), clock: clocktesting.NewFakeClock(time.Now())}
	w.client = newPod(t, w.node, "c0", localCluster, "100.64.1.2", "fd64:1::2", false)
	w.external = newPod(t, w.node, "x0", "", "100.100.1.2", "fd99:1::2", false)
	w.e1 = newPod(t, w.node, "e1", localCluster, "100.64.2.2", "fd64:2::2", true)
	w.e2 = newPod(t, w.node, "e2", localCluster, "100.64.3.2", "fd64:3::2", true)
	w.w1 = newPod(t, w.node, "w1", remoteCluster, "100.65.2.2", "fd65:2::2", true)
	w.w2 = newPod(t, w.node, "w2", remoteCluster, "100.65.3.2", "fd65:3::2", true)
	w.podsByName = map[string]*pod{}
	for _, p := range []*pod{w.e1, w.e2, w.w1, w.w2} {
		w.podsByName[p.name] = p
	}

	w.startProxier(t, edit...)
	return w
}

// startProxier gives the node a new proxier (of the mode edit sets), as a
// restart of mcsd would.
func (w *kernelWorld) startProxier(t *testing.T, edit ...func(*Config)) {
	t.Helper()
	cfg := Config{
		ClusterID:       localCluster,
		PodCIDRs:        []string{"100.64.0.0/16", "fd64::/16"},
		ClusterSetCIDRs: []netip.Prefix{vipalloc.DefaultClusterSetCIDRv4, vipalloc.DefaultClusterSetCIDRv6},
		Clock:           w.clock,
	}
	for _, e := range edit {
		e(&cfg)
	}
	// As mcsd does: the proxier makes its kernel interfaces, conntrack
	// handle and rule counter inside the node's namespace.
	cfg.InNetns = w.node.Do
	var err error
	if w.proxier, err = NewDualStack(cfg); err != nil {
		t.Fatal(err)
	}
}

// kernelModes runs test once per mode, each with the commands it needs.
func kernelModes(t *testing.T, test func(t *testing.T, mode Mode)) {
	testenv.RequireRoot(t)
	for _, mode := range []Mode{ModeNFTables, ModeIPTables} {
		t.Run(string(mode), func(t *testing.T) {
			if mode == ModeIPTables {
				testenv.RequireCommands(t, "iptables", "ip6tables", "iptables-restore", "ip6tables-restore", "iptables-save", "ip", "sysctl")
			} else {
				testenv.RequireCommands(t, "nft", "ip", "sysctl")
			}
			test(t, mode)
		})
	}
}

// kernelFamily is one IP family of the real-kernel tests. Every scenario
// runs once per family on the same dual-stack node and pods (see
// eachFamily): imports have a ClusterSetIP of each family and pods an
// address of each.
type kernelFamily struct {
	name     string      // the subtest's name
	family   v1.IPFamily // the proxier's
	nft      string      // nftables family of the table
	iptables string      // iptables or ip6tables
	tcp, udp string      // networks that dial this family only
	slice    int         // index of this family's slice in kernelSlices' result
}

var kernelFamilies = []kernelFamily{
	{name: "IPv4", family: v1.IPv4Protocol, nft: "ip", iptables: "iptables", tcp: "tcp4", udp: "udp4", slice: 0},
	{name: "IPv6", family: v1.IPv6Protocol, nft: "ip6", iptables: "ip6tables", tcp: "tcp6", udp: "udp6", slice: 1},
}

// eachFamily runs test once per IP family, as subtests named for it.
func eachFamily(t *testing.T, test func(t *testing.T, f kernelFamily)) {
	t.Helper()
	for _, f := range kernelFamilies {
		t.Run(f.name, func(t *testing.T) { test(t, f) })
	}
}

// vip is ClusterSetIP n of the family: 243.64.0.<n>, or the address of the
// default IPv6 clusterset CIDR whose last byte is n.
func (f kernelFamily) vip(n byte) string {
	if f.family == v1.IPv4Protocol {
		return netip.AddrFrom4([4]byte{243, 64, 0, n}).String()
	}
	a := vipalloc.DefaultClusterSetCIDRv6.Addr().As16()
	a[15] = n
	return netip.AddrFrom16(a).String()
}

// at is ClusterSetIP n's port, to dial.
func (f kernelFamily) at(n byte, port int) string {
	return net.JoinHostPort(f.vip(n), fmt.Sprint(port))
}

// ip is p's address of the family.
func (f kernelFamily) ip(p *pod) netip.Addr {
	if f.family == v1.IPv4Protocol {
		return p.ip
	}
	return p.ip6
}

// gw is the node's address of the family on p's veth.
func (f kernelFamily) gw(p *pod) netip.Addr {
	if f.family == v1.IPv4Protocol {
		return p.gw
	}
	return p.gw6
}

// of is the node's proxier of the family.
func (f kernelFamily) of(d *DualStack) *Proxier {
	if f.family == v1.IPv4Protocol {
		return d.ipv4
	}
	return d.ipv6
}

// vips are ClusterSetIP n of both families, for an import.
func vips(n byte) []string {
	var out []string
	for _, f := range kernelFamilies {
		out = append(out, f.vip(n))
	}
	return out
}

// withMode sets the Config's mode.
func withMode(mode Mode) func(*Config) { return func(c *Config) { c.Mode = mode } }

// slices returns the IPv4 and IPv6 MCS EndpointSlices of pods for service.
func kernelSlices(service, cluster string, ports []slicePort, pods ...*pod) []*discoveryv1.EndpointSlice {
	var eps4, eps6 []discoveryv1.Endpoint
	for _, p := range pods {
		eps4 = append(eps4, ready(p.ip.String()))
		eps6 = append(eps6, ready(p.ip6.String()))
	}
	return []*discoveryv1.EndpointSlice{newSlice(service, cluster, ports, eps4...), newSlice(service, cluster, ports, eps6...)}
}

// sync applies pending changes to both families now.
func (w *kernelWorld) sync(t *testing.T) {
	t.Helper()
	for _, p := range []*Proxier{w.proxier.ipv4, w.proxier.ipv6} {
		if err := p.runner.fn(); err != nil {
			t.Fatalf("%s sync: %v", p.family, err)
		}
	}
}

// spread opens n connections from p to address and counts who answered.
func spread(t *testing.T, p *pod, network, address string, n int) map[string]int {
	t.Helper()
	counts := map[string]int{}
	for i := 0; i < n; i++ {
		id, err := p.ask(t.Context(), network, address)
		if err != nil {
			t.Fatalf("connection %d to %s/%s: %v", i, network, address, err)
		}
		counts[id.Pod]++
	}
	return counts
}

// refused checks that a connection to address is refused (a reset or an
// ICMP port unreachable), not left to time out as a drop would be. A
// datagram the node itself sends is rejected in the output hook, before it
// leaves: the kernel tells the sender at once, with EPERM.
func refused(t *testing.T, p *pod, network, address string) {
	t.Helper()
	start := time.Now()
	_, err := p.ask(t.Context(), network, address)
	if !errors.Is(err, syscall.ECONNREFUSED) && !(p.host && strings.HasPrefix(network, "udp") && errors.Is(err, syscall.EPERM)) {
		t.Errorf("%s %s: got %v after %v, want connection refused", network, address, err, time.Since(start))
	}
}

func TestKernel(t *testing.T) {
	kernelModes(t, testKernel)
}

func testKernel(t *testing.T, mode Mode) {
	rootHadTable, rootHadChains := map[string]bool{}, map[string][]string{}
	for _, f := range kernelFamilies {
		rootHadTable[f.nft] = exec.Command("nft", "list", "table", f.nft, TableName).Run() == nil
		rootHadChains[f.iptables] = iptablesChainsIn(t, nil, f.family)
	}

	w := newKernelWorld(t, withMode(mode))
	web := []slicePort{tcp("http", 80, 8080), udp("dns", 53, 5353), tcp("peer", 90, 9000)}
	imports := []*mcsv1beta1.ServiceImport{
		newImport("web", vips(10),
			[]mcsv1beta1.ServicePort{tcpPort("http", 80), udpPort("dns", 53), tcpPort("peer", 90)}),
		newImport("mismatch", vips(11), []mcsv1beta1.ServicePort{tcpPort("http", 80)}),
		newImport("sticky", vips(12), []mcsv1beta1.ServicePort{tcpPort("http", 80)}, withAffinity(60)),
		newImport("empty", vips(13), []mcsv1beta1.ServicePort{tcpPort("http", 80), udpPort("dns", 53)}),
		newImport("close", vips(14), []mcsv1beta1.ServicePort{tcpPort("http", 80)},
			withTrafficDistribution(v1.ServiceTrafficDistributionPreferClose)),
		newImport("self", vips(15), []mcsv1beta1.ServicePort{tcpPort("http", 80)}),
		newImport("internal", vips(16), []mcsv1beta1.ServicePort{tcpPort("http", 80)},
			withInternalTrafficPolicy(v1.ServiceInternalTrafficPolicyLocal)),
		newImport("draining", vips(17), []mcsv1beta1.ServicePort{tcpPort("http", 80)}),
	}
	var all []*discoveryv1.EndpointSlice
	all = append(all, kernelSlices("web", localCluster, web, w.e1, w.e2)...)
	all = append(all, kernelSlices("web", remoteCluster, web, w.w1, w.w2)...)
	all = append(all, kernelSlices("mismatch", localCluster, []slicePort{tcp("http", 80, 8080)}, w.e1, w.e2)...)
	all = append(all, kernelSlices("mismatch", remoteCluster, []slicePort{tcp("http", 8080, 8080)}, w.w1, w.w2)...)
	all = append(all, kernelSlices("sticky", localCluster, []slicePort{tcp("http", 80, 8080)}, w.e1, w.e2)...)
	all = append(all, kernelSlices("sticky", remoteCluster, []slicePort{tcp("http", 80, 8080)}, w.w1, w.w2)...)
	closeLocal := kernelSlices("close", localCluster, []slicePort{tcp("http", 80, 8080)}, w.e1, w.e2)
	all = append(all, closeLocal...)
	all = append(all, kernelSlices("close", remoteCluster, []slicePort{tcp("http", 80, 8080)}, w.w1, w.w2)...)
	all = append(all, kernelSlices("self", localCluster, []slicePort{tcp("http", 80, 8080)}, w.e1)...)
	internalLocal := kernelSlices("internal", localCluster, []slicePort{tcp("http", 80, 8080)}, w.e1)
	all = append(all, internalLocal...)
	all = append(all, kernelSlices("internal", remoteCluster, []slicePort{tcp("http", 80, 8080)}, w.w1, w.w2)...)
	// draining[f.slice] is the local slice of family f.
	var draining []*discoveryv1.EndpointSlice
	for _, f := range kernelFamilies {
		local := newSlice("draining", localCluster, []slicePort{tcp("http", 80, 8080)},
			ready(f.ip(w.e1).String()), terminating(f.ip(w.e2).String(), true))
		draining = append(draining, local)
		all = append(all, local, newSlice("draining", remoteCluster, []slicePort{tcp("http", 80, 8080)}, terminating(f.ip(w.w1).String(), false)))
	}
	for _, si := range imports {
		w.proxier.OnServiceImportAdd(si)
	}
	for _, s := range all {
		w.proxier.OnEndpointSliceAdd(s)
	}
	w.proxier.OnServiceImportsSynced()
	w.proxier.OnEndpointSlicesSynced()
	w.sync(t)
	// The node's own processes, whose packets take the output hooks.
	host := &pod{name: "the node", ns: w.node, host: true}

	t.Run("the rules are programmed in the node's namespace, not the test's", func(t *testing.T) {
		eachFamily(t, func(t *testing.T, f kernelFamily) {
			if mode == ModeIPTables {
				save := f.iptables + "-save"
				if got := iptablesChainsIn(t, w.node, f.family); !slices.Contains(got, iptServicesChain) {
					t.Errorf("%s in the node: chains %v", save, got)
				}
				if got := iptablesChainsIn(t, nil, f.family); len(got) > len(rootHadChains[f.iptables]) {
					t.Errorf("chains appeared in the test's own namespace: %v", got)
				}
				return
			}
			if _, err := w.node.Exec("nft", "list", "table", f.nft, TableName); err != nil {
				t.Errorf("no %s table in the node: %v", f.nft, err)
			}
			if !rootHadTable[f.nft] && exec.Command("nft", "list", "table", f.nft, TableName).Run() == nil {
				t.Errorf("the %s table appeared in the test's own namespace", f.nft)
			}
		})
	})
	t.Run("connections reach the backends of both clusters, spread evenly", func(t *testing.T) {
		eachFamily(t, func(t *testing.T, f kernelFamily) {
			counts := spread(t, w.client, f.tcp, f.at(10, 80), 200)
			for _, name := range []string{"e1", "e2", "w1", "w2"} {
				if counts[name] < 20 {
					t.Errorf("%s got %d of 200 connections: %v", name, counts[name], counts)
				}
			}
			t.Logf("TCP spread over 200 connections: %v", counts)
			counts = spread(t, w.client, f.udp, f.at(10, 53), 80)
			if len(counts) != 4 {
				t.Errorf("UDP reached %v, want all four backends", counts)
			}
		})
	})
	t.Run("a cluster exporting the port name on another number gets none of its traffic", func(t *testing.T) {
		eachFamily(t, func(t *testing.T, f kernelFamily) {
			counts := spread(t, w.client, f.tcp, f.at(11, 80), 40)
			if counts["w1"]+counts["w2"] != 0 || counts["e1"] == 0 || counts["e2"] == 0 {
				t.Errorf("connections went to %v, want e1 and e2 only", counts)
			}
		})
	})
	t.Run("ClientIP session affinity sticks, and moves when its endpoint goes", func(t *testing.T) {
		eachFamily(t, func(t *testing.T, f kernelFamily) {
			counts := spread(t, w.client, f.tcp, f.at(12, 80), 20)
			if len(counts) != 1 {
				t.Fatalf("connections went to %v, want one backend", counts)
			}
			var sticky *pod
			for name := range counts {
				sticky = w.podsByName[name]
			}
			others := map[string][]*pod{}
			for _, p := range []*pod{w.e1, w.e2, w.w1, w.w2} {
				if p != sticky {
					others[p.cluster] = append(others[p.cluster], p)
				}
			}
			// The endpoint keeps running: only the rules may take the client
			// elsewhere.
			w.proxier.OnEndpointSliceUpdate(nil, kernelSlices("sticky", sticky.cluster, []slicePort{tcp("http", 80, 8080)}, others[sticky.cluster]...)[f.slice])
			w.sync(t)
			counts = spread(t, w.client, f.tcp, f.at(12, 80), 20)
			if len(counts) != 1 || counts[sticky.name] != 0 {
				t.Errorf("after %s went, connections went to %v, want one other backend", sticky.name, counts)
			}
			w.proxier.OnEndpointSliceUpdate(nil, kernelSlices("sticky", sticky.cluster, []slicePort{tcp("http", 80, 8080)}, append(others[sticky.cluster], sticky)...)[f.slice])
			w.sync(t)
		})
	})
	t.Run("no endpoints: refused at once", func(t *testing.T) {
		eachFamily(t, func(t *testing.T, f kernelFamily) {
			for _, from := range []*pod{w.client, host} {
				refused(t, from, f.tcp, f.at(13, 80))
				refused(t, from, f.udp, f.at(13, 53))
			}
		})
	})
	t.Run("a port the ClusterSetIP does not have: refused at once", func(t *testing.T) {
		eachFamily(t, func(t *testing.T, f kernelFamily) {
			for _, from := range []*pod{w.client, host} {
				refused(t, from, f.tcp, f.at(10, 81))
				refused(t, from, f.udp, f.at(10, 54))
			}
		})
	})
	t.Run("pod traffic keeps its source address; traffic from outside the pod network and from the node is masqueraded", func(t *testing.T) {
		eachFamily(t, func(t *testing.T, f kernelFamily) {
			peerOf := func(p *pod) string {
				ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
				defer cancel()
				c, err := p.ns.Dial(ctx, f.tcp, f.at(10, 90))
				if err != nil {
					t.Fatalf("from %s: %v", p.name, err)
				}
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(2 * time.Second))
				buf := make([]byte, 64)
				n, _ := c.Read(buf)
				return strings.TrimSpace(string(buf[:n]))
			}
			gateways := map[string]bool{}
			for _, p := range w.podsByName {
				gateways[f.gw(p).String()] = true
			}
			for i := 0; i < 5; i++ {
				if got := peerOf(w.client); got != f.ip(w.client).String() {
					t.Errorf("a backend saw a pod client as %s, want %s", got, f.ip(w.client))
				}
				if got := peerOf(w.external); !gateways[got] {
					t.Errorf("a backend saw an outside client as %s, want the node's address", got)
				}
				if got := peerOf(host); !gateways[got] {
					t.Errorf("a backend saw the node as %s, want its address on the backend's link", got)
				}
			}
		})
	})
	t.Run("an endpoint reaching itself through the ClusterSetIP (hairpin)", func(t *testing.T) {
		eachFamily(t, func(t *testing.T, f kernelFamily) {
			id, err := w.e1.ask(t.Context(), f.tcp, f.at(15, 80))
			if err != nil || id.Pod != "e1" {
				t.Errorf("e1 to itself: %v %v", id, err)
			}
		})
	})
	t.Run("PreferClose uses the local cluster, and fails over when it has no endpoints", func(t *testing.T) {
		eachFamily(t, func(t *testing.T, f kernelFamily) {
			counts := spread(t, w.client, f.tcp, f.at(14, 80), 30)
			if counts["w1"]+counts["w2"] != 0 {
				t.Errorf("connections went to %v, want the local cluster only", counts)
			}
			down := newSlice("close", localCluster, []slicePort{tcp("http", 80, 8080)}, notReady(f.ip(w.e1).String()), notReady(f.ip(w.e2).String()))
			w.proxier.OnEndpointSliceUpdate(closeLocal[f.slice], down)
			w.sync(t)
			counts = spread(t, w.client, f.tcp, f.at(14, 80), 30)
			if counts["e1"]+counts["e2"] != 0 || len(counts) != 2 {
				t.Errorf("after failover connections went to %v, want w1 and w2", counts)
			}
			w.proxier.OnEndpointSliceUpdate(down, closeLocal[f.slice])
			w.sync(t)
			counts = spread(t, w.client, f.tcp, f.at(14, 80), 30)
			if counts["w1"]+counts["w2"] != 0 {
				t.Errorf("after recovery connections went to %v, want the local cluster only", counts)
			}
		})
	})
	t.Run("internalTrafficPolicy Local uses this cluster's endpoints only, and drops without them", func(t *testing.T) {
		eachFamily(t, func(t *testing.T, f kernelFamily) {
			counts := spread(t, w.client, f.tcp, f.at(16, 80), 20)
			if counts["e1"] != 20 {
				t.Errorf("connections went to %v, want e1 only", counts)
			}
			gone := newSlice("internal", localCluster, []slicePort{tcp("http", 80, 8080)})
			gone.AddressType = internalLocal[f.slice].AddressType
			gone.Name = internalLocal[f.slice].Name
			w.proxier.OnEndpointSliceUpdate(internalLocal[f.slice], gone)
			w.sync(t)
			// Dropped, not refused: the client hears nothing.
			ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
			defer cancel()
			if id, err := w.client.ask(ctx, f.tcp, f.at(16, 80)); err == nil || errors.Is(err, syscall.ECONNREFUSED) {
				t.Errorf("without local endpoints: %v, %v; want a timeout (dropped)", id, err)
			}
			w.proxier.OnEndpointSliceUpdate(gone, internalLocal[f.slice])
			w.sync(t)
			if id, err := w.client.ask(t.Context(), f.tcp, f.at(16, 80)); err != nil || id.Pod != "e1" {
				t.Errorf("after the local endpoint came back: %v, %v", id, err)
			}
		})
	})
	t.Run("serving terminating endpoints get traffic only while no endpoint is ready", func(t *testing.T) {
		eachFamily(t, func(t *testing.T, f kernelFamily) {
			counts := spread(t, w.client, f.tcp, f.at(17, 80), 20)
			if counts["e1"] != 20 {
				t.Errorf("connections went to %v, want the ready e1 only", counts)
			}
			drained := newSlice("draining", localCluster, []slicePort{tcp("http", 80, 8080)},
				notReady(f.ip(w.e1).String()), terminating(f.ip(w.e2).String(), true))
			w.proxier.OnEndpointSliceUpdate(draining[f.slice], drained)
			w.sync(t)
			// w1 is terminating but no longer serving: never used.
			counts = spread(t, w.client, f.tcp, f.at(17, 80), 20)
			if counts["e2"] != 20 {
				t.Errorf("with nothing ready connections went to %v, want the serving terminating e2 only", counts)
			}
		})
	})
	t.Run("a removed endpoint gets no new connections, and a UDP flow moves off it", func(t *testing.T) {
		eachFamily(t, func(t *testing.T, f kernelFamily) {
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			conn, err := w.client.ns.Dial(ctx, f.udp, f.at(10, 53))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			first, err := echo.AskUDP(ctx, conn)
			if err != nil {
				t.Fatal(err)
			}
			for i := 0; i < 3; i++ {
				if id, err := echo.AskUDP(ctx, conn); err != nil || id.Pod != first.Pod {
					t.Fatalf("the UDP flow moved from %s to %v (%v) on its own", first.Pod, id, err)
				}
			}
			gone := w.podsByName[first.Pod]
			var remaining []*pod
			for _, p := range []*pod{w.e1, w.e2, w.w1, w.w2} {
				if p != gone && p.cluster == gone.cluster {
					remaining = append(remaining, p)
				}
			}
			// The backend keeps running: only conntrack cleanup moves the flow.
			if n := w.conntrackEntries(t, f, conn.LocalAddr(), f.vip(10), f.ip(gone)); n != 1 && n != -1 {
				t.Errorf("before the update: %d conntrack entries of the flow to %s, want 1", n, gone.name)
			}
			updated := kernelSlices("web", gone.cluster, web, remaining...)
			w.proxier.OnEndpointSliceUpdate(nil, updated[f.slice])
			w.sync(t)
			if n := w.conntrackEntries(t, f, conn.LocalAddr(), f.vip(10), f.ip(gone)); n > 0 {
				t.Errorf("after the update: %d conntrack entries of the flow to %s, want none", n, gone.name)
			}
			id, err := echo.AskUDP(ctx, conn)
			if err != nil {
				t.Fatal(err)
			}
			if id.Pod == gone.name {
				t.Errorf("the UDP flow still reaches the removed endpoint %s", gone.name)
			}
			counts := spread(t, w.client, f.tcp, f.at(10, 80), 40)
			if counts[gone.name] != 0 {
				t.Errorf("the removed endpoint %s got %d new connections", gone.name, counts[gone.name])
			}
			restored := kernelSlices("web", gone.cluster, web, append(remaining, gone)...)
			w.proxier.OnEndpointSliceUpdate(nil, restored[f.slice])
			w.sync(t)
		})
	})
	t.Run("rules flushed by hand come back", func(t *testing.T) {
		eachFamily(t, func(t *testing.T, f kernelFamily) {
			// nftables: the next full sync rewrites the table; iptables: the
			// jump check, once per sync period, finds the jump gone.
			flush := []string{"nft", "flush", "table", f.nft, TableName}
			if mode == ModeIPTables {
				flush = []string{f.iptables, "-t", "nat", "-F"}
			}
			if _, err := w.node.Exec(flush[0], flush[1:]...); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
			defer cancel()
			if _, err := w.client.ask(ctx, f.tcp, f.at(10, 80)); err == nil {
				t.Fatal("the ClusterSetIP still works with the rules flushed")
			}
			p := f.of(w.proxier)
			p.mu.Lock()
			if mode == ModeIPTables {
				p.lastTableCheck = time.Time{} // as if a sync period had passed
			} else {
				p.needRewrite = true
			}
			p.mu.Unlock()
			w.sync(t)
			if counts := spread(t, w.client, f.tcp, f.at(10, 80), 20); len(counts) < 2 {
				t.Errorf("after the resync connections went to %v", counts)
			}
		})
	})
	t.Run("the netlink RuleCounter sees the base chain, a flush and a deleted table", func(t *testing.T) {
		if mode != ModeNFTables {
			t.Skip("nftables mode")
		}
		eachFamily(t, func(t *testing.T, f kernelFamily) {
			var counter netfilter.RuleCounter
			if err := w.node.Do(func() (err error) { counter, err = netfilter.NewRuleCounter(TableName); return err }); err != nil {
				t.Fatal(err)
			}
			if n, err := counter.CountRules(f.family, natPreroutingChain); err != nil || n == 0 {
				t.Fatalf("programmed table: %d rules, %v", n, err)
			}
			if _, err := w.node.Exec("nft", "flush", "chain", f.nft, TableName, natPreroutingChain); err != nil {
				t.Fatal(err)
			}
			if n, err := counter.CountRules(f.family, natPreroutingChain); err != nil || n != 0 {
				t.Fatalf("flushed chain: %d rules, %v", n, err)
			}
			if _, err := w.node.Exec("nft", "delete", "table", f.nft, TableName); err != nil {
				t.Fatal(err)
			}
			// The kernel answers a dump of a missing table with nothing.
			if n, err := counter.CountRules(f.family, natPreroutingChain); n != 0 || (err != nil && !errors.Is(err, netfilter.ErrNotFound)) {
				t.Errorf("deleted table: %d rules, %v; want none", n, err)
			}
			p := f.of(w.proxier)
			p.mu.Lock()
			p.needRewrite = true
			p.mu.Unlock()
			w.sync(t)
			if n, err := counter.CountRules(f.family, natPreroutingChain); err != nil || n == 0 {
				t.Errorf("rewritten table: %d rules, %v", n, err)
			}
		})
	})
	t.Run("removing an import with affinity deletes its chains and its ClusterSetIP's elements", func(t *testing.T) {
		// iptables: the import's service-port chain; nftables: the
		// balancing chains of its affinity timeout (no other import uses
		// affinity) and its ClusterSetIP's elements in the dispatch map.
		stickyChain := iptServiceChain("ns/sticky/tcp/80")
		leftovers := func(t *testing.T, f kernelFamily) []string {
			t.Helper()
			if mode == ModeIPTables {
				if got := iptablesChainsIn(t, w.node, f.family); slices.Contains(got, stickyChain) {
					return []string{stickyChain}
				}
				return nil
			}
			out, err := w.node.Exec("nft", "list", "table", f.nft, TableName)
			if err != nil {
				t.Fatal(err)
			}
			var left []string
			for _, line := range strings.Split(out, "\n") {
				line = strings.TrimSpace(line)
				if strings.HasPrefix(line, "chain ") && strings.Contains(line, affinityChainInfix) {
					left = append(left, line)
				}
			}
			services, err := w.node.Exec("nft", "list", "map", f.nft, TableName, serviceIPsMap)
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(services, f.vip(12)+" . ") {
				left = append(left, f.vip(12)+" in "+serviceIPsMap)
			}
			return left
		}
		for _, f := range kernelFamilies {
			if left := leftovers(t, f); len(left) == 0 {
				t.Fatalf("%s: the sticky import's objects are not there to be removed", f.name)
			}
		}
		w.proxier.OnServiceImportDelete(imports[2])
		w.sync(t)
		if mode == ModeNFTables {
			// Flushed chains are deleted by a later sync.
			w.clock.Step(staleChainDelay)
			w.sync(t)
		}
		eachFamily(t, func(t *testing.T, f kernelFamily) {
			if left := leftovers(t, f); len(left) != 0 {
				t.Errorf("the sticky import's objects remain: %v", left)
			}
		})
	})
}

func TestKernelPreferLocalCluster(t *testing.T) {
	kernelModes(t, testKernelPreferLocalCluster)
}

func testKernelPreferLocalCluster(t *testing.T, mode Mode) {
	w := newKernelWorld(t, withMode(mode), func(c *Config) { c.PreferLocalCluster = true })
	port := []slicePort{tcp("http", 80, 8080)}
	local := kernelSlices("web", localCluster, port, w.e1, w.e2)
	w.proxier.OnServiceImportAdd(newImport("web", vips(10), []mcsv1beta1.ServicePort{tcpPort("http", 80)}))
	for _, s := range append(local, kernelSlices("web", remoteCluster, port, w.w1, w.w2)...) {
		w.proxier.OnEndpointSliceAdd(s)
	}
	w.proxier.OnServiceImportsSynced()
	w.proxier.OnEndpointSlicesSynced()
	w.sync(t)

	t.Run("an import without trafficDistribution stays in the local cluster", func(t *testing.T) {
		eachFamily(t, func(t *testing.T, f kernelFamily) {
			counts := spread(t, w.client, f.tcp, f.at(10, 80), 30)
			if counts["w1"]+counts["w2"] != 0 || len(counts) != 2 {
				t.Errorf("connections went to %v, want e1 and e2", counts)
			}
		})
	})
	t.Run("and fails over to the other cluster when the local one has no endpoints", func(t *testing.T) {
		eachFamily(t, func(t *testing.T, f kernelFamily) {
			w.proxier.OnEndpointSliceDelete(local[f.slice])
			w.sync(t)
			counts := spread(t, w.client, f.tcp, f.at(10, 80), 30)
			if counts["e1"]+counts["e2"] != 0 || len(counts) != 2 {
				t.Errorf("connections went to %v, want w1 and w2", counts)
			}
		})
	})
}

func TestKernelUDPOnly(t *testing.T) {
	kernelModes(t, testKernelUDPOnly)
}

func testKernelUDPOnly(t *testing.T, mode Mode) {
	w := newKernelWorld(t, withMode(mode))
	port := []slicePort{udp("dns", 53, 5353)}
	w.proxier.OnServiceImportAdd(newImport("dns", vips(20), []mcsv1beta1.ServicePort{udpPort("dns", 53)}))
	for _, s := range append(kernelSlices("dns", localCluster, port, w.e1, w.e2), kernelSlices("dns", remoteCluster, port, w.w1, w.w2)...) {
		w.proxier.OnEndpointSliceAdd(s)
	}
	w.proxier.OnServiceImportsSynced()
	w.proxier.OnEndpointSlicesSynced()
	// A table whose only load-balancing chains are UDP ones, then a new
	// UDP chain in a partial sync: nft must accept both.
	w.sync(t)
	t.Run("an import with only a UDP port reaches its endpoints", func(t *testing.T) {
		eachFamily(t, func(t *testing.T, f kernelFamily) {
			if counts := spread(t, w.client, f.udp, f.at(20, 53), 40); len(counts) < 2 {
				t.Errorf("datagrams went to %v, want several endpoints", counts)
			}
		})
	})
	t.Run("a new endpoint count of a UDP port in a later sync", func(t *testing.T) {
		eachFamily(t, func(t *testing.T, f kernelFamily) {
			w.proxier.OnEndpointSliceUpdate(nil, kernelSlices("dns", localCluster, port, w.e1)[f.slice])
			w.sync(t)
			counts := spread(t, w.client, f.udp, f.at(20, 53), 40)
			if counts["e2"] != 0 || len(counts) < 2 {
				t.Errorf("datagrams went to %v, want e1, w1 and w2", counts)
			}
		})
	})
}

// conntrackEntries counts, with conntrack(8) in the node, the UDP entries
// of family f from client to vip whose replies come from endpoint; -1
// without conntrack(8).
func (w *kernelWorld) conntrackEntries(t *testing.T, f kernelFamily, client net.Addr, vip string, endpoint netip.Addr) int {
	t.Helper()
	if _, err := exec.LookPath("conntrack"); err != nil {
		t.Logf("not counting conntrack entries: %v", err)
		return -1
	}
	family := "ipv4"
	if f.family == v1.IPv6Protocol {
		family = "ipv6"
	}
	from := client.(*net.UDPAddr).AddrPort()
	out, err := w.node.Exec("conntrack", "-L", "-f", family, "-p", "udp",
		"--orig-src", from.Addr().Unmap().String(), "--orig-port-src", fmt.Sprint(from.Port()),
		"--orig-dst", vip, "--reply-src", endpoint.String())
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "udp ") {
			n++
		}
	}
	return n
}

// iptablesChainsIn lists the proxier's chains that the family's iptables
// shows in ns, or in the test's own namespace when ns is nil.
func iptablesChainsIn(t *testing.T, ns *netns.NS, family v1.IPFamily) []string {
	t.Helper()
	var in func(func() error) error
	if ns != nil {
		in = ns.Do
	}
	ipt, err := netfilter.NewIPTables(family, in)
	if err != nil {
		// Not installed: there can be no chain.
		return nil
	}
	var chains []string
	for _, table := range []string{iptablesNAT, iptablesFilter} {
		all, err := ipt.ListChains(t.Context(), table)
		if err != nil {
			t.Fatalf("%s chains of the %s table: %v", family, table, err)
		}
		for _, c := range all {
			if isIPTablesChain(c) {
				chains = append(chains, c)
			}
		}
	}
	return chains
}

func TestKernelSwitchingModes(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequireCommands(t, "nft", "iptables", "ip6tables", "iptables-save", "ip6tables-save", "ip", "sysctl")
	port := []slicePort{tcp("http", 80, 8080)}
	w := newKernelWorld(t, withMode(ModeNFTables))
	// start runs a new proxier of mode on the node, as mcsd does when it
	// starts: New deletes the other mode's leftovers first.
	start := func(t *testing.T, mode Mode) {
		t.Helper()
		w.startProxier(t, withMode(mode))
		w.proxier.OnServiceImportAdd(newImport("web", vips(10), []mcsv1beta1.ServicePort{tcpPort("http", 80)}))
		for _, s := range kernelSlices("web", localCluster, port, w.e1, w.e2) {
			w.proxier.OnEndpointSliceAdd(s)
		}
		w.proxier.OnServiceImportsSynced()
		w.proxier.OnEndpointSlicesSynced()
		w.sync(t)
	}
	works := func(t *testing.T, f kernelFamily, mode Mode) {
		t.Helper()
		if counts := spread(t, w.client, f.tcp, f.at(10, 80), 20); len(counts) != 2 {
			t.Errorf("in %s mode connections went to %v, want e1 and e2", mode, counts)
		}
	}
	nftTable := func(f kernelFamily) bool {
		_, err := w.node.Exec("nft", "list", "table", f.nft, TableName)
		return err == nil
	}
	iptablesLeft := func(t *testing.T, f kernelFamily) []string {
		t.Helper()
		out, err := w.node.Exec(f.iptables + "-save")
		if err != nil {
			t.Fatal(err)
		}
		var left []string
		for _, line := range strings.Split(out, "\n") {
			if strings.Contains(line, iptablesChainPrefix) {
				left = append(left, line)
			}
		}
		return left
	}

	t.Run("nftables mode", func(t *testing.T) {
		start(t, ModeNFTables)
		eachFamily(t, func(t *testing.T, f kernelFamily) { works(t, f, ModeNFTables) })
	})
	t.Run("from nftables to iptables mode: no nftables table is left", func(t *testing.T) {
		start(t, ModeIPTables)
		eachFamily(t, func(t *testing.T, f kernelFamily) {
			works(t, f, ModeIPTables)
			if nftTable(f) {
				t.Errorf("table %s %s left behind", f.nft, TableName)
			}
		})
	})
	t.Run("from iptables back to nftables mode: no chain or jump of iptables mode is left", func(t *testing.T) {
		start(t, ModeNFTables)
		eachFamily(t, func(t *testing.T, f kernelFamily) {
			works(t, f, ModeNFTables)
			if left := iptablesLeft(t, f); len(left) != 0 {
				t.Errorf("%s rules left behind:\n%s", f.iptables, strings.Join(left, "\n"))
			}
		})
	})
}
