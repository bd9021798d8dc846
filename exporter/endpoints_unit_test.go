package exporter

import (
	"fmt"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/utils/ptr"

	"github.com/mcsd-io/mcsd/internal/record"
)

func TestBrokerEndpointKeepsWhatOtherClustersNeed(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   discoveryv1.Endpoint
		want discoveryv1.Endpoint
	}{
		{
			name: "an endpoint without conditions is neither ready nor serving nor terminating",
			in:   discoveryv1.Endpoint{Addresses: []string{"10.0.0.1"}},
			want: discoveryv1.Endpoint{Addresses: []string{"10.0.0.1"}, Conditions: conditions(false, false, false)},
		},
		{
			name: "a ready endpoint without a serving condition is serving",
			in:   discoveryv1.Endpoint{Addresses: []string{"10.0.0.1"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}},
			want: discoveryv1.Endpoint{Addresses: []string{"10.0.0.1"}, Conditions: conditions(true, true, false)},
		},
		{
			name: "a terminating endpoint that still serves says so",
			in: discoveryv1.Endpoint{Addresses: []string{"10.0.0.1"}, Conditions: discoveryv1.EndpointConditions{
				Ready: ptr.To(false), Serving: ptr.To(true), Terminating: ptr.To(true)}},
			want: discoveryv1.Endpoint{Addresses: []string{"10.0.0.1"}, Conditions: conditions(false, true, true)},
		},
		{
			name: "the hostname is kept; node, zone and target, which name this cluster's objects, stay here",
			in: discoveryv1.Endpoint{
				Addresses:  []string{"10.0.0.1"},
				Conditions: conditions(true, true, false),
				Hostname:   ptr.To("cart-0"), NodeName: ptr.To("node-1"), Zone: ptr.To("zone-a"),
				TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: "shop", Name: "cart-0", UID: "1234", ResourceVersion: "7", APIVersion: "v1"},
			},
			want: discoveryv1.Endpoint{
				Addresses:  []string{"10.0.0.1"},
				Conditions: conditions(true, true, false),
				Hostname:   ptr.To("cart-0"),
			},
		},
		{
			name: "hints and the deprecated topology stay in this cluster",
			in: discoveryv1.Endpoint{
				Addresses:          []string{"10.0.0.1"},
				Conditions:         conditions(true, true, false),
				Hints:              &discoveryv1.EndpointHints{ForZones: []discoveryv1.ForZone{{Name: "zone-a"}}},
				DeprecatedTopology: map[string]string{"kubernetes.io/hostname": "node-1"},
			},
			want: discoveryv1.Endpoint{Addresses: []string{"10.0.0.1"}, Conditions: conditions(true, true, false)},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := brokerEndpoint(tc.in)
			if !apiequality.Semantic.DeepEqual(got, tc.want) {
				t.Fatalf("brokerEndpoint = %+v, want %+v", got, tc.want)
			}
		})
	}

	t.Run("the broker endpoint shares no memory with the cached one", func(t *testing.T) {
		in := discoveryv1.Endpoint{Addresses: []string{"10.0.0.1"}, Hostname: ptr.To("cart-0"), Conditions: conditions(true, true, false)}
		got := brokerEndpoint(in)
		in.Addresses[0], *in.Hostname, *in.Conditions.Ready = "10.9.9.9", "changed", false
		if got.Addresses[0] != "10.0.0.1" || *got.Hostname != "cart-0" || !*got.Conditions.Ready {
			t.Fatalf("changing the cached endpoint changed the broker's: %+v", got)
		}
	})
}

func conditions(ready, serving, terminating bool) discoveryv1.EndpointConditions {
	return discoveryv1.EndpointConditions{Ready: ptr.To(ready), Serving: ptr.To(serving), Terminating: ptr.To(terminating)}
}

func TestNormalizePortsSpellsOutDefaultsInAFixedOrder(t *testing.T) {
	port := func(name *string, proto *corev1.Protocol, number int32) discoveryv1.EndpointPort {
		return discoveryv1.EndpointPort{Name: name, Protocol: proto, Port: ptr.To(number)}
	}
	tcp, udp := ptr.To(corev1.ProtocolTCP), ptr.To(corev1.ProtocolUDP)
	for _, tc := range []struct {
		name string
		in   []discoveryv1.EndpointPort
		want []discoveryv1.EndpointPort
	}{
		{"no ports are an empty list, not nil", nil, []discoveryv1.EndpointPort{}},
		{"an unnamed port gets the empty name", []discoveryv1.EndpointPort{port(nil, tcp, 80)}, []discoveryv1.EndpointPort{port(ptr.To(""), tcp, 80)}},
		{"a port without a protocol is TCP", []discoveryv1.EndpointPort{port(ptr.To("http"), nil, 80)}, []discoveryv1.EndpointPort{port(ptr.To("http"), tcp, 80)}},
		{
			"ports are sorted by name, then protocol",
			[]discoveryv1.EndpointPort{port(ptr.To("http"), tcp, 80), port(ptr.To("dns"), udp, 53), port(ptr.To("dns"), tcp, 53)},
			[]discoveryv1.EndpointPort{port(ptr.To("dns"), tcp, 53), port(ptr.To("dns"), udp, 53), port(ptr.To("http"), tcp, 80)},
		},
		{
			"the appProtocol is kept",
			[]discoveryv1.EndpointPort{{Name: ptr.To("grpc"), Protocol: tcp, Port: ptr.To[int32](9090), AppProtocol: ptr.To("kubernetes.io/h2c")}},
			[]discoveryv1.EndpointPort{{Name: ptr.To("grpc"), Protocol: tcp, Port: ptr.To[int32](9090), AppProtocol: ptr.To("kubernetes.io/h2c")}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := normalizePorts(tc.in)
			if got == nil || !apiequality.Semantic.DeepEqual(got, tc.want) {
				t.Fatalf("normalizePorts = %s, want %s", portsString(got), portsString(tc.want))
			}
		})
	}
}

func portsString(ports []discoveryv1.EndpointPort) string {
	var out []string
	for _, p := range ports {
		out = append(out, fmt.Sprintf("%s/%s/%d/%s", ptr.Deref(p.Name, "<nil>"), ptr.Deref(p.Protocol, "<nil>"), ptr.Deref(p.Port, 0), ptr.Deref(p.AppProtocol, "")))
	}
	return fmt.Sprint(out)
}

func TestSliceUpToDate(t *testing.T) {
	want := brokerSlices(testCluster, testNamespace, testName, []*discoveryv1.EndpointSlice{localSlice("cart-a", "10.0.0.1")})[0]
	for _, tc := range []struct {
		name   string
		change func(*discoveryv1.EndpointSlice)
		up     bool
	}{
		{"the same slice is up to date", func(*discoveryv1.EndpointSlice) {}, true},
		{"a slice with labels of its own besides ours is up to date", func(s *discoveryv1.EndpointSlice) { s.Labels["example.com/extra"] = "x" }, true},
		{"a slice with the broker's namespace and a resource version is up to date", func(s *discoveryv1.EndpointSlice) {
			s.ResourceVersion, s.Namespace = "42", testBrokerNS
		}, true},
		{"a slice missing one of our labels is not", func(s *discoveryv1.EndpointSlice) { delete(s.Labels, record.LabelManagedBy) }, false},
		{"a slice with another source cluster is not", func(s *discoveryv1.EndpointSlice) { s.Labels[record.LabelSourceCluster] = "west" }, false},
		{"a slice of another address type is not", func(s *discoveryv1.EndpointSlice) { s.AddressType = discoveryv1.AddressTypeIPv6 }, false},
		{"a slice with another endpoint is not", func(s *discoveryv1.EndpointSlice) { s.Endpoints[0].Addresses[0] = "10.0.0.2" }, false},
		{"a slice whose endpoint is no longer ready is not", func(s *discoveryv1.EndpointSlice) { s.Endpoints[0].Conditions.Ready = ptr.To(false) }, false},
		{"a slice with another port is not", func(s *discoveryv1.EndpointSlice) { s.Ports[0].Port = ptr.To[int32](9090) }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			have := want.DeepCopy()
			tc.change(have)
			if got := sliceUpToDate(have, want); got != tc.up {
				t.Fatalf("sliceUpToDate = %v, want %v", got, tc.up)
			}
		})
	}
}

func TestBrokerSlicesLayOutTheLocalEndpoints(t *testing.T) {
	ipv6 := func(name string, addresses ...string) *discoveryv1.EndpointSlice {
		s := localSlice(name, addresses...)
		s.AddressType = discoveryv1.AddressTypeIPv6
		return s
	}
	otherPort := func(name string, addresses ...string) *discoveryv1.EndpointSlice {
		s := localSlice(name, addresses...)
		s.Ports[0].Port = ptr.To[int32](9090)
		return s
	}
	fqdn := localSlice("cart-fqdn", "cart.example.com")
	fqdn.AddressType = discoveryv1.AddressTypeFQDN
	many := localSlice("cart-many")
	for i := range 2*record.MaxEndpointsPerSlice + 1 {
		many.Endpoints = append(many.Endpoints, discoveryv1.Endpoint{Addresses: []string{fmt.Sprintf("10.1.%d.%d", i/256, i%256)}})
	}

	for _, tc := range []struct {
		name   string
		local  []*discoveryv1.EndpointSlice
		slices map[string]int // name -> endpoints
	}{
		{"no local slices give no broker slices", nil, map[string]int{}},
		{"a local slice without endpoints still gives its family's slice", []*discoveryv1.EndpointSlice{localSlice("cart-a")},
			map[string]int{"shop.cart.east.ipv4-0": 0}},
		{"each address family gets its own slice, named for it",
			[]*discoveryv1.EndpointSlice{localSlice("cart-a", "10.0.0.1"), ipv6("cart-b", "fd00::1", "fd00::2")},
			map[string]int{"shop.cart.east.ipv4-0": 1, "shop.cart.east.ipv6-0": 2}},
		{"endpoints with other ports go to a slice of their own",
			[]*discoveryv1.EndpointSlice{localSlice("cart-a", "10.0.0.1"), otherPort("cart-b", "10.0.0.2")},
			map[string]int{"shop.cart.east.ipv4-0": 1, "shop.cart.east.ipv4-1": 1}},
		{"FQDN slices are not exported", []*discoveryv1.EndpointSlice{fqdn}, map[string]int{}},
		{"more endpoints than a broker slice holds are split into numbered slices", []*discoveryv1.EndpointSlice{many},
			map[string]int{"shop.cart.east.ipv4-0": record.MaxEndpointsPerSlice, "shop.cart.east.ipv4-1": record.MaxEndpointsPerSlice, "shop.cart.east.ipv4-2": 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := map[string]int{}
			for _, s := range brokerSlices(testCluster, testNamespace, testName, tc.local) {
				got[s.Name] = len(s.Endpoints)
				if !apiequality.Semantic.DeepEqual(s.Labels, record.EndpointSliceLabels(testCluster, testNamespace, testName)) {
					t.Fatalf("slice %s labels %v", s.Name, s.Labels)
				}
				if s.Namespace != "" {
					t.Fatalf("slice %s has namespace %q; the writer sets the broker's", s.Name, s.Namespace)
				}
			}
			if !apiequality.Semantic.DeepEqual(got, tc.slices) {
				t.Fatalf("broker slices %v, want %v", got, tc.slices)
			}
		})
	}

	t.Run("the layout does not depend on the order of the local slices", func(t *testing.T) {
		local := []*discoveryv1.EndpointSlice{localSlice("cart-a", "10.0.0.3", "10.0.0.1"), otherPort("cart-b", "10.0.0.2"), ipv6("cart-c", "fd00::1")}
		want := brokerSlices(testCluster, testNamespace, testName, local)
		reversed := slices.Clone(local)
		slices.Reverse(reversed)
		if got := brokerSlices(testCluster, testNamespace, testName, reversed); !apiequality.Semantic.DeepEqual(got, want) {
			t.Fatalf("reversed local slices give\n%+v\nwant\n%+v", got, want)
		}
	})
}
