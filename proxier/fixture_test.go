package proxier

import (
	"flag"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/knftables"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/mcsd-io/mcsd/mcsslice"
	"github.com/mcsd-io/mcsd/proxier/netfilter"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// The clusters of the unit tests: this node is in "east".
const (
	localCluster  = "east"
	remoteCluster = "west"
	thisNode      = "node-a"
)

// epoch is the fake clock's start.
var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// fixture is a proxier on a strict Fake (a fakeIPTables in iptables mode),
// with a fake clock and conntrack.
type fixture struct {
	t     *testing.T
	nft   *strictFake
	ipt   *fakeIPTables
	ct    *fakeConntrack
	clock *clocktesting.FakeClock
	p     *Proxier
}

// newFixture returns a proxier for family whose informers have synced
// (with nothing); edit changes the Config first.
func newFixture(t *testing.T, family v1.IPFamily, edit ...func(*Config)) *fixture {
	t.Helper()
	f := &fixture{t: t, ct: &fakeConntrack{}, clock: clocktesting.NewFakeClock(epoch)}
	f.nft = newStrictFake(t, knftables.Family(familyWords(family).ip))
	f.ipt = newFakeIPTables()
	cfg := Config{
		ClusterID:   localCluster,
		IPFamily:    family,
		NFTables:    f.nft,
		IPTables:    f.ipt,
		RuleCounter: fakeTableCounter{f.nft.Fake},
		Conntrack:   f.ct,
		PodCIDRs:    []string{"10.1.0.0/16", "fd00:1::/48"},
		Clock:       f.clock,
	}
	for _, e := range edit {
		e(&cfg)
	}
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	f.p = p
	return f
}

// fakeDualStack is a DualStack over two proxiers made by New from cfg, each
// with the fakes its edit sets: what NewDualStack makes on a host.
func fakeDualStack(t *testing.T, cfg Config, edit4, edit6 func(*Config)) *DualStack {
	t.Helper()
	cfg4, cfg6 := cfg, cfg
	cfg4.IPFamily, cfg6.IPFamily = v1.IPv4Protocol, v1.IPv6Protocol
	edit4(&cfg4)
	edit6(&cfg6)
	p4, err := New(cfg4)
	if err != nil {
		t.Fatal(err)
	}
	p6, err := New(cfg6)
	if err != nil {
		t.Fatal(err)
	}
	return &DualStack{ipv4: p4, ipv6: p6}
}

// start delivers objects as an informer's initial list would, marks both
// informers synced and runs the first sync, as the sync loop would.
func (f *fixture) start(objects ...any) {
	f.t.Helper()
	f.add(objects...)
	f.p.OnServiceImportsSynced()
	f.p.OnEndpointSlicesSynced()
	f.sync()
}

func (f *fixture) add(objects ...any) {
	for _, o := range objects {
		switch o := o.(type) {
		case *mcsv1beta1.ServiceImport:
			f.p.OnServiceImportAdd(o)
		case *discoveryv1.EndpointSlice:
			f.p.OnEndpointSliceAdd(o)
		default:
			f.t.Fatalf("cannot add %T", o)
		}
	}
}

// sync runs a sync now and fails the test if it fails.
func (f *fixture) sync() {
	f.t.Helper()
	if err := f.p.runner.fn(); err != nil {
		f.t.Fatalf("sync failed: %v", err)
	}
}

// failNextSync makes the next nftables transaction or iptables-restore
// fail.
func (f *fixture) failNextSync() {
	if f.p.backend.mode() == ModeIPTables {
		f.ipt.failRestores = 1
		return
	}
	f.setNFT(&failingNFT{Interface: f.nft, fail: true, once: true})
}

// setNFT makes the nftables backend write through nft from now on.
func (f *fixture) setNFT(nft knftables.Interface) {
	f.p.backend.(*nftablesBackend).nft = nft
}

// fullSync makes the next sync a full one, as the periodic one is, and runs it.
func (f *fixture) fullSync() {
	f.t.Helper()
	f.clock.Step(DefaultFullSyncPeriod)
	f.sync()
}

// tracer is the nftables tracer; see trace for one of the fixture's mode.
func (f *fixture) tracer() *tracer {
	if f.p.backend.mode() != ModeNFTables {
		f.t.Fatal("the nftables tracer of a fixture in iptables mode")
	}
	return newTracer(f.t, f.nft.Fake)
}

// trace sends pkt through the rules of the fixture's mode and returns every
// outcome.
func (f *fixture) trace(pkt packet) []outcome {
	f.t.Helper()
	if f.p.backend.mode() == ModeIPTables {
		return newIPTTracer(f.t, f.ipt).trace(pkt)
	}
	return f.tracer().trace(pkt)
}

// fixtureFunc builds a fixture, as newFixture does.
type fixtureFunc func(t *testing.T, family v1.IPFamily, edit ...func(*Config)) *fixture

// inEachMode runs test once per mode, with newFixture building fixtures of
// that mode: the behaviour the modes share is tested once.
func inEachMode(t *testing.T, test func(t *testing.T, mode Mode, newFixture fixtureFunc)) {
	for _, mode := range []Mode{ModeNFTables, ModeIPTables} {
		t.Run(string(mode), func(t *testing.T) {
			test(t, mode, func(t *testing.T, family v1.IPFamily, edit ...func(*Config)) *fixture {
				return newFixture(t, family, append([]func(*Config){withMode(mode)}, edit...)...)
			})
		})
	}
}

// assertGolden compares the table with testdata/<name>.nft.
func (f *fixture) assertGolden(name string) {
	f.t.Helper()
	assertGolden(f.t, name, f.nft.Dump())
}

func assertGolden(t *testing.T, name, got string) {
	t.Helper()
	assertGoldenFile(t, name+".nft", got)
}

// assertGoldenFile compares got with testdata/<file>.
func assertGoldenFile(t *testing.T, file, got string) {
	t.Helper()
	path := filepath.Join("testdata", file)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./proxier -run %s -update to create it)", err, t.Name())
	}
	if diff := cmp.Diff(string(want), got); diff != "" {
		t.Errorf("rules differ from %s (-want +got; -update rewrites it):\n%s", path, diff)
	}
}

// fakeTableCounter counts a Fake's rules, as netfilter.NewRuleCounter counts
// the kernel's.
type fakeTableCounter struct{ nft *knftables.Fake }

func (c fakeTableCounter) CountRules(_ v1.IPFamily, chain string) (int, error) {
	c.nft.RLock()
	defer c.nft.RUnlock()
	if c.nft.Table == nil || c.nft.Table.Chains[chain] == nil {
		return 0, netfilter.ErrNotFound
	}
	return len(c.nft.Table.Chains[chain].Rules), nil
}

// fakeConntrack records what it is asked to clean.
type fakeConntrack struct {
	mu    sync.Mutex
	calls []map[netfilter.ServicePort][]netip.Addr
}

func (c *fakeConntrack) CleanStaleEntries(_ v1.IPFamily, ports map[netfilter.ServicePort][]netip.Addr) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls = append(c.calls, maps.Clone(ports))
	return 0, nil
}

// take returns the calls since the last take.
func (c *fakeConntrack) take() []map[netfilter.ServicePort][]netip.Addr {
	c.mu.Lock()
	defer c.mu.Unlock()
	calls := c.calls
	c.calls = nil
	return calls
}

var _ clock.Clock = (*clocktesting.FakeClock)(nil)

// importOption changes a ServiceImport built by newImport.
type importOption func(*mcsv1beta1.ServiceImport)

// newImport returns a ClusterSetIP ServiceImport "ns/name" with the given
// VIPs and ports.
func newImport(name string, ips []string, ports []mcsv1beta1.ServicePort, opts ...importOption) *mcsv1beta1.ServiceImport {
	si := &mcsv1beta1.ServiceImport{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, CreationTimestamp: metav1.NewTime(epoch)},
		Spec: mcsv1beta1.ServiceImportSpec{
			Type:  mcsv1beta1.ClusterSetIP,
			IPs:   ips,
			Ports: ports,
		},
	}
	for _, o := range opts {
		o(si)
	}
	return si
}

func tcpPort(name string, port int32) mcsv1beta1.ServicePort {
	return mcsv1beta1.ServicePort{Name: name, Protocol: v1.ProtocolTCP, Port: port}
}

func udpPort(name string, port int32) mcsv1beta1.ServicePort {
	return mcsv1beta1.ServicePort{Name: name, Protocol: v1.ProtocolUDP, Port: port}
}

func withAffinity(seconds int32) importOption {
	return func(si *mcsv1beta1.ServiceImport) {
		si.Spec.SessionAffinity = v1.ServiceAffinityClientIP
		si.Spec.SessionAffinityConfig = &v1.SessionAffinityConfig{ClientIP: &v1.ClientIPConfig{TimeoutSeconds: ptr.To(seconds)}}
	}
}

func withTrafficDistribution(d string) importOption {
	return func(si *mcsv1beta1.ServiceImport) { si.Spec.TrafficDistribution = ptr.To(d) }
}

func withInternalTrafficPolicy(p v1.ServiceInternalTrafficPolicy) importOption {
	return func(si *mcsv1beta1.ServiceImport) { si.Spec.InternalTrafficPolicy = ptr.To(p) }
}

func createdAt(t time.Time) importOption {
	return func(si *mcsv1beta1.ServiceImport) { si.CreationTimestamp = metav1.NewTime(t) }
}

// slicePort is one port of an MCS EndpointSlice: the service port's name
// and protocol, the number the source cluster exports it on (0: not in the
// annotation) and the endpoints' port.
type slicePort struct {
	name        string
	protocol    v1.Protocol
	servicePort int32
	targetPort  int32
}

func tcp(name string, servicePort, targetPort int32) slicePort {
	return slicePort{name, v1.ProtocolTCP, servicePort, targetPort}
}

func udp(name string, servicePort, targetPort int32) slicePort {
	return slicePort{name, v1.ProtocolUDP, servicePort, targetPort}
}

// newSlice returns the MCS EndpointSlice "<service>-<cluster>[-suffix]" of
// cluster's endpoints for service, with the service-ports annotation.
func newSlice(service, cluster string, ports []slicePort, eps ...discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
	addressType := discoveryv1.AddressTypeIPv4
	for _, e := range eps {
		if a, err := netip.ParseAddr(e.Addresses[0]); err == nil && a.Is6() {
			addressType = discoveryv1.AddressTypeIPv6
		}
	}
	s := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: "ns",
			Name:      service + "-" + cluster + "-" + string(addressType),
			Labels: map[string]string{
				mcsv1beta1.LabelServiceName:   service,
				mcsv1beta1.LabelSourceCluster: cluster,
				discoveryv1.LabelManagedBy:    "mcsd.io",
			},
			Annotations: map[string]string{},
		},
		AddressType: addressType,
		Endpoints:   eps,
	}
	exported := mcsslice.ServicePorts{}
	for _, p := range ports {
		s.Ports = append(s.Ports, discoveryv1.EndpointPort{Name: ptr.To(p.name), Protocol: ptr.To(p.protocol), Port: ptr.To(p.targetPort)})
		if p.servicePort != 0 {
			exported.Add(p.name, p.protocol, p.servicePort)
		}
	}
	s.Annotations[mcsslice.ServicePortsAnnotation] = exported.Encode()
	return s
}

func withoutAnnotation(s *discoveryv1.EndpointSlice) *discoveryv1.EndpointSlice {
	delete(s.Annotations, mcsslice.ServicePortsAnnotation)
	return s
}

func named(s *discoveryv1.EndpointSlice, name string) *discoveryv1.EndpointSlice {
	s.Name = name
	return s
}

// ready is a ready endpoint; the other constructors are its variants.
func ready(ip string) discoveryv1.Endpoint {
	return discoveryv1.Endpoint{Addresses: []string{ip}, Conditions: discoveryv1.EndpointConditions{
		Ready: ptr.To(true), Serving: ptr.To(true), Terminating: ptr.To(false)}}
}

func notReady(ip string) discoveryv1.Endpoint {
	return discoveryv1.Endpoint{Addresses: []string{ip}, Conditions: discoveryv1.EndpointConditions{
		Ready: ptr.To(false), Serving: ptr.To(false), Terminating: ptr.To(false)}}
}

func terminating(ip string, serving bool) discoveryv1.Endpoint {
	return discoveryv1.Endpoint{Addresses: []string{ip}, Conditions: discoveryv1.EndpointConditions{
		Ready: ptr.To(false), Serving: ptr.To(serving), Terminating: ptr.To(true)}}
}

func onNode(e discoveryv1.Endpoint, node string) discoveryv1.Endpoint {
	e.NodeName = ptr.To(node)
	return e
}

// Addresses used by the tests.
var (
	podClient  = netip.MustParseAddr("10.1.9.9")   // a pod of this cluster
	hostClient = netip.MustParseAddr("192.0.2.10") // outside the pod CIDRs
)

func pkt(src netip.Addr, dst string, proto string, port int) packet {
	return packet{src: src, dst: netip.MustParseAddr(dst), proto: proto, dport: port}
}
