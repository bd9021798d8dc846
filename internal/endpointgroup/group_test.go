package endpointgroup

import (
	"fmt"
	"reflect"
	"testing"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/utils/ptr"
)

func slice(family discoveryv1.AddressType, port int32, addrs ...string) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{AddressType: family, Ports: []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To(port)}}}
	for _, a := range addrs {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{a}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}})
	}
	return s
}

func TestOf(t *testing.T) {
	t.Run("endpoints group by family and ports, each address once, sorted", func(t *testing.T) {
		in := []*discoveryv1.EndpointSlice{
			slice(discoveryv1.AddressTypeIPv6, 8080, "fd00::2"),
			slice(discoveryv1.AddressTypeIPv4, 8080, "10.0.0.3", "10.0.0.1"),
			slice(discoveryv1.AddressTypeIPv4, 8080, "10.0.0.2", "10.0.0.1"),
			slice(discoveryv1.AddressTypeIPv4, 9090, "10.0.0.9"),
			slice(discoveryv1.AddressTypeFQDN, 8080, "example.com"),
		}
		got := Of(in, Options{})
		want := []string{"IPv4 8080 [10.0.0.1 10.0.0.2 10.0.0.3]", "IPv4 9090 [10.0.0.9]", "IPv6 8080 [fd00::2]"}
		if len(got) != len(want) {
			t.Fatalf("%d groups, want %d: %+v", len(got), len(want), got)
		}
		for i, g := range got {
			var addrs []string
			for _, ep := range g.Endpoints {
				addrs = append(addrs, ep.Addresses[0])
			}
			if s := fmt.Sprintf("%s %d %v", g.Family, *g.Ports[0].Port, addrs); s != want[i] {
				t.Errorf("group %d is %q, want %q", i, s, want[i])
			}
		}
	})
	t.Run("the same slices in another order give the same groups", func(t *testing.T) {
		a := slice(discoveryv1.AddressTypeIPv4, 8080, "10.0.0.1", "10.0.0.2")
		b := slice(discoveryv1.AddressTypeIPv4, 9090, "10.0.0.3")
		x, y := Of([]*discoveryv1.EndpointSlice{a, b}, Options{}), Of([]*discoveryv1.EndpointSlice{b, a}, Options{})
		if !reflect.DeepEqual(x, y) {
			t.Fatalf("%+v != %+v", x, y)
		}
	})
	t.Run("the family filter and the endpoint transform apply", func(t *testing.T) {
		in := []*discoveryv1.EndpointSlice{slice(discoveryv1.AddressTypeIPv4, 80, "10.0.0.1"), slice(discoveryv1.AddressTypeIPv6, 80, "fd00::1")}
		got := Of(in, Options{
			Family:   func(f discoveryv1.AddressType) bool { return f == discoveryv1.AddressTypeIPv6 },
			Endpoint: func(ep discoveryv1.Endpoint) discoveryv1.Endpoint { ep.Hostname = ptr.To("h"); return ep },
		})
		if len(got) != 1 || got[0].Family != discoveryv1.AddressTypeIPv6 || *got[0].Endpoints[0].Hostname != "h" {
			t.Fatalf("got %+v", got)
		}
	})
	t.Run("a slice without endpoints still makes an empty group", func(t *testing.T) {
		got := Of([]*discoveryv1.EndpointSlice{slice(discoveryv1.AddressTypeIPv4, 80)}, Options{})
		if len(got) != 1 || len(got[0].Chunks()) != 1 || len(got[0].Chunks()[0]) != 0 {
			t.Fatalf("got %+v", got)
		}
	})
}

func TestChunks(t *testing.T) {
	var addrs []string
	for i := range 2*MaxPerSlice + 1 {
		addrs = append(addrs, fmt.Sprintf("10.%d.%d.%d", i/65536, i/256%256, i%256))
	}
	g := Of([]*discoveryv1.EndpointSlice{slice(discoveryv1.AddressTypeIPv4, 80, addrs...)}, Options{})[0]
	chunks := g.Chunks()
	if len(chunks) != 3 || len(chunks[0]) != MaxPerSlice || len(chunks[2]) != 1 {
		t.Fatalf("%d chunks of %d, %d, ...: want 1000, 1000, 1", len(chunks), len(chunks[0]), len(chunks[len(chunks)-1]))
	}
}

func TestKeepLeavesEndpointsOutButNotTheirGroup(t *testing.T) {
	in := []*discoveryv1.EndpointSlice{slice(discoveryv1.AddressTypeIPv4, 8080, "10.0.0.1", "192.168.0.1", "10.0.0.2")}
	got := Of(in, Options{Keep: func(ep discoveryv1.Endpoint) bool { return ep.Addresses[0] != "192.168.0.1" }})
	if len(got) != 1 || len(got[0].Endpoints) != 2 || got[0].Endpoints[0].Addresses[0] != "10.0.0.1" || got[0].Endpoints[1].Addresses[0] != "10.0.0.2" {
		t.Fatalf("groups %+v", got)
	}
	none := Of(in, Options{Keep: func(discoveryv1.Endpoint) bool { return false }})
	if len(none) != 1 || len(none[0].Endpoints) != 0 {
		t.Fatalf("with every endpoint left out the group should stay, empty: %+v", none)
	}
}
