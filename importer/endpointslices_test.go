package importer

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/mcsd-io/mcsd/internal/endpointgroup"
	"github.com/mcsd-io/mcsd/internal/record"
	"github.com/mcsd-io/mcsd/mcsslice"
)

func serviceImport(families ...corev1.IPFamily) *mcsv1beta1.ServiceImport {
	return &mcsv1beta1.ServiceImport{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "cart", UID: types.UID("uid-1")},
		Spec:       mcsv1beta1.ServiceImportSpec{Type: mcsv1beta1.ClusterSetIP, IPFamilies: families},
	}
}

func brokerSlice(cluster string, family discoveryv1.AddressType, index int, targetPort int32, addrs ...string) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: "mcsd-broker",
			Name:      record.EndpointSliceName(cluster, "shop", "cart", family, index),
			Labels:    record.EndpointSliceLabels(cluster, "shop", "cart"),
		},
		AddressType: family,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To(targetPort)}},
	}
	for _, a := range addrs {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{a}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}})
	}
	return s
}

func exportOf(cluster string, ports ...mcsv1beta1.ServicePort) record.Export {
	return record.Export{Cluster: cluster, Namespace: "shop", Name: "cart", Ports: ports}
}

func addresses(s *discoveryv1.EndpointSlice) []string {
	var out []string
	for _, ep := range s.Endpoints {
		out = append(out, ep.Addresses[0])
	}
	return out
}

func names(ss []*discoveryv1.EndpointSlice) []string {
	var out []string
	for _, s := range ss {
		out = append(out, s.Name)
	}
	return out
}

func TestDesiredSlices(t *testing.T) {
	http80 := mcsv1beta1.ServicePort{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}

	t.Run("one slice per source cluster and family, with the MCS labels, the importer's managed-by, an owner and the exported port numbers", func(t *testing.T) {
		si := serviceImport(corev1.IPv4Protocol, corev1.IPv6Protocol)
		got := desiredSlices(si, []source{
			{export: exportOf("west", mcsv1beta1.ServicePort{Name: "http", Protocol: corev1.ProtocolTCP, Port: 8081}),
				slices: []*discoveryv1.EndpointSlice{brokerSlice("west", discoveryv1.AddressTypeIPv4, 0, 8080, "10.2.0.1")}},
			{export: exportOf("east", http80), slices: []*discoveryv1.EndpointSlice{
				brokerSlice("east", discoveryv1.AddressTypeIPv6, 0, 8080, "fd00::1"),
				brokerSlice("east", discoveryv1.AddressTypeIPv4, 0, 8080, "10.1.0.2", "10.1.0.1"),
			}},
		})
		if want := []string{"cart.east.ipv4-0", "cart.east.ipv6-0", "cart.west.ipv4-0"}; !slices.Equal(names(got), want) {
			t.Fatalf("slices %v, want %v", names(got), want)
		}
		for _, s := range got {
			cluster := strings.Split(s.Name, ".")[1]
			if s.Namespace != "shop" {
				t.Errorf("%s: namespace %q", s.Name, s.Namespace)
			}
			if s.Labels[mcsv1beta1.LabelServiceName] != "cart" || s.Labels[mcsv1beta1.LabelSourceCluster] != cluster ||
				s.Labels[discoveryv1.LabelManagedBy] != mcsslice.Manager {
				t.Errorf("%s: labels %v", s.Name, s.Labels)
			}
			if _, ok := s.Labels[discoveryv1.LabelServiceName]; ok {
				t.Errorf("%s carries kubernetes.io/service-name: kube-proxy would take it", s.Name)
			}
			if len(s.OwnerReferences) != 1 || s.OwnerReferences[0].UID != "uid-1" || s.OwnerReferences[0].Kind != "ServiceImport" || !ptr.Deref(s.OwnerReferences[0].Controller, false) {
				t.Errorf("%s: owner references %+v", s.Name, s.OwnerReferences)
			}
			ports, err := mcsslice.DecodeServicePorts(s.Annotations[mcsslice.ServicePortsAnnotation])
			if err != nil {
				t.Fatal(err)
			}
			want := map[string]int32{"east": 80, "west": 8081}[cluster]
			if p, ok := ports.Lookup("http", corev1.ProtocolTCP); !ok || p != want {
				t.Errorf("%s: service ports %v, want http/TCP on %d", s.Name, ports, want)
			}
		}
		if a := addresses(got[0]); !slices.Equal(a, []string{"10.1.0.1", "10.1.0.2"}) {
			t.Errorf("endpoints %v, want sorted", a)
		}
	})

	t.Run("a cluster's endpoints beyond 1000 in a family spill into more slices", func(t *testing.T) {
		var broker []*discoveryv1.EndpointSlice
		for i := range 3 {
			var addrs []string
			for j := range 900 {
				addrs = append(addrs, fmt.Sprintf("10.%d.%d.%d", i, j/250, j%250))
			}
			broker = append(broker, brokerSlice("east", discoveryv1.AddressTypeIPv4, i, 8080, addrs...))
		}
		got := desiredSlices(serviceImport(corev1.IPv4Protocol), []source{{export: exportOf("east", http80), slices: broker}})
		if want := []string{"cart.east.ipv4-0", "cart.east.ipv4-1", "cart.east.ipv4-2"}; !slices.Equal(names(got), want) {
			t.Fatalf("slices %v, want %v", names(got), want)
		}
		total := 0
		seen := map[string]bool{}
		for _, s := range got {
			if len(s.Endpoints) > endpointgroup.MaxPerSlice {
				t.Fatalf("%s holds %d endpoints", s.Name, len(s.Endpoints))
			}
			for _, a := range addresses(s) {
				seen[a] = true
			}
			total += len(s.Endpoints)
		}
		if total != 2700 || len(seen) != 2700 {
			t.Fatalf("%d endpoints (%d distinct), want 2700", total, len(seen))
		}
	})

	t.Run("endpoints with other ports go to other slices; an endpoint in two broker slices is kept once", func(t *testing.T) {
		got := desiredSlices(serviceImport(corev1.IPv4Protocol), []source{{export: exportOf("east", http80), slices: []*discoveryv1.EndpointSlice{
			brokerSlice("east", discoveryv1.AddressTypeIPv4, 0, 8080, "10.1.0.1", "10.1.0.2"),
			brokerSlice("east", discoveryv1.AddressTypeIPv4, 1, 9090, "10.1.0.3"),
			brokerSlice("east", discoveryv1.AddressTypeIPv4, 2, 8080, "10.1.0.2"),
		}}})
		if len(got) != 2 {
			t.Fatalf("slices %v, want two", names(got))
		}
		if a := addresses(got[0]); !slices.Equal(a, []string{"10.1.0.1", "10.1.0.2"}) || *got[0].Ports[0].Port != 8080 {
			t.Fatalf("first slice %v on %d", a, *got[0].Ports[0].Port)
		}
		if a := addresses(got[1]); !slices.Equal(a, []string{"10.1.0.3"}) || *got[1].Ports[0].Port != 9090 {
			t.Fatalf("second slice %v on %d", a, *got[1].Ports[0].Port)
		}
	})

	t.Run("a family the service does not have is left out; an empty broker slice stays an empty slice", func(t *testing.T) {
		got := desiredSlices(serviceImport(corev1.IPv6Protocol), []source{{export: exportOf("east", http80), slices: []*discoveryv1.EndpointSlice{
			brokerSlice("east", discoveryv1.AddressTypeIPv4, 0, 8080, "10.1.0.1"),
			brokerSlice("east", discoveryv1.AddressTypeIPv6, 0, 8080),
		}}})
		if len(got) != 1 || got[0].Name != "cart.east.ipv6-0" || len(got[0].Endpoints) != 0 {
			t.Fatalf("slices %v", names(got))
		}
	})

	t.Run("a cluster that is not a source contributes nothing", func(t *testing.T) {
		if got := desiredSlices(serviceImport(corev1.IPv4Protocol), nil); len(got) != 0 {
			t.Fatalf("slices %v from no sources", names(got))
		}
	})

	t.Run("the same input in any order gives the same slices", func(t *testing.T) {
		sources := []source{
			{export: exportOf("east", http80), slices: []*discoveryv1.EndpointSlice{
				brokerSlice("east", discoveryv1.AddressTypeIPv4, 0, 8080, "10.1.0.3", "10.1.0.1"),
				brokerSlice("east", discoveryv1.AddressTypeIPv4, 1, 8080, "10.1.0.2"),
				brokerSlice("east", discoveryv1.AddressTypeIPv6, 0, 8080, "fd00::2", "fd00::1"),
			}},
			{export: exportOf("west", http80), slices: []*discoveryv1.EndpointSlice{brokerSlice("west", discoveryv1.AddressTypeIPv4, 0, 8080, "10.2.0.1")}},
		}
		si := serviceImport(corev1.IPv4Protocol, corev1.IPv6Protocol)
		want := desiredSlices(si, sources)
		rng := rand.New(rand.NewPCG(1, 2))
		for range 20 {
			shuffled := slices.Clone(sources)
			rng.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
			for i := range shuffled {
				s := slices.Clone(shuffled[i].slices)
				rng.Shuffle(len(s), func(i, j int) { s[i], s[j] = s[j], s[i] })
				shuffled[i].slices = s
			}
			if got := desiredSlices(si, shuffled); !apiequality.Semantic.DeepEqual(got, want) {
				t.Fatalf("order changed the result: %v vs %v", names(got), names(want))
			}
		}
	})
}

func TestSliceUpToDate(t *testing.T) {
	want := desiredSlices(serviceImport(corev1.IPv4Protocol), []source{{
		export: exportOf("east", mcsv1beta1.ServicePort{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}),
		slices: []*discoveryv1.EndpointSlice{brokerSlice("east", discoveryv1.AddressTypeIPv4, 0, 8080, "10.1.0.1")},
	}})[0]
	have := want.DeepCopy()
	have.ResourceVersion = "7"
	have.Labels["team"] = "payments"
	have.Annotations["note"] = "someone else's"
	if !sliceUpToDate(have, want) {
		t.Fatal("labels and annotations of others made the slice out of date")
	}
	for name, edit := range map[string]func(*discoveryv1.EndpointSlice){
		"an endpoint removed":            func(s *discoveryv1.EndpointSlice) { s.Endpoints = nil },
		"kubernetes.io/service-name set": func(s *discoveryv1.EndpointSlice) { s.Labels[discoveryv1.LabelServiceName] = "cart" },
		"managed-by changed":             func(s *discoveryv1.EndpointSlice) { s.Labels[discoveryv1.LabelManagedBy] = "someone" },
		"service ports changed":          func(s *discoveryv1.EndpointSlice) { s.Annotations[mcsslice.ServicePortsAnnotation] = "{}" },
		"owner removed":                  func(s *discoveryv1.EndpointSlice) { s.OwnerReferences = nil },
		"target port changed":            func(s *discoveryv1.EndpointSlice) { s.Ports[0].Port = ptr.To[int32](1) },
	} {
		s := have.DeepCopy()
		edit(s)
		if sliceUpToDate(s, want) {
			t.Errorf("%s: still up to date", name)
		}
	}
}

func TestATrimmedOwnSliceComparesAsTheWholeOne(t *testing.T) {
	whole := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "cart.east.ipv4-0", Labels: mcsslice.Labels("cart", "east"),
			Annotations: map[string]string{"mcsd.io/service-ports": `{"http/TCP":80}`}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"10.1.0.1"}}},
	}
	obj, err := TrimOwnSlice(whole.DeepCopy())
	if err != nil {
		t.Fatal(err)
	}
	trimmed := obj.(*discoveryv1.EndpointSlice)
	if trimmed.Endpoints != nil {
		t.Fatal("the cache keeps the endpoints")
	}
	if !sliceUpToDate(trimmed, whole) {
		t.Fatal("a trimmed slice does not compare equal to the whole slice it came from")
	}
	edited := whole.DeepCopy()
	edited.Endpoints[0].Addresses[0] = "10.9.9.9"
	if sliceUpToDate(trimmed, edited) {
		t.Fatal("a trimmed slice compares equal to different endpoints")
	}
	if upd := sliceUpdate(trimmed, whole); upd.Annotations[contentDigestAnnotation] != "" || len(upd.Endpoints) != 1 {
		t.Fatalf("an update built from the cache would write %v, %v", upd.Annotations, upd.Endpoints)
	}
}
