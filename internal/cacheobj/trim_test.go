package cacheobj

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

func TestManagedFields(t *testing.T) {
	s := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: "a", ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "x"}}}}
	got, err := ManagedFields(s)
	if err != nil || got.(*discoveryv1.EndpointSlice).ManagedFields != nil || got.(*discoveryv1.EndpointSlice).Name != "a" {
		t.Fatalf("got %+v (%v)", got, err)
	}
}

func TestRemoteEndpointSliceKeepsWhatAMirrorReads(t *testing.T) {
	s := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name: "a", Namespace: "ns", ResourceVersion: "7", UID: types.UID("u"),
			Labels:      map[string]string{"multicluster.kubernetes.io/source-cluster": "east"},
			Annotations: map[string]string{"big": "annotation"},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"10.0.0.1"}}},
	}
	got, _ := RemoteEndpointSlice(s)
	r := got.(*discoveryv1.EndpointSlice)
	if r.Name != "a" || r.Namespace != "ns" || r.ResourceVersion != "7" || r.Labels["multicluster.kubernetes.io/source-cluster"] != "east" ||
		r.AddressType != discoveryv1.AddressTypeIPv4 || len(r.Endpoints) != 1 {
		t.Fatalf("lost what a mirror reads: %+v", r)
	}
	if r.UID != "" || r.Annotations != nil {
		t.Fatalf("kept what it does not: %+v", r.ObjectMeta)
	}
	if other, _ := RemoteEndpointSlice("other"); other != "other" {
		t.Fatalf("another object became %v", other)
	}
}

func TestDataPlaneSlice(t *testing.T) {
	in := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name: "web.east.ipv4-0", Namespace: "ns", ResourceVersion: "7", UID: "u",
			Labels:          map[string]string{discoveryv1.LabelServiceName: "web"},
			Annotations:     map[string]string{"keep": "1", "drop": "2"},
			OwnerReferences: []metav1.OwnerReference{{Name: "web"}},
			ManagedFields:   []metav1.ManagedFieldsEntry{{Manager: "x"}},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Port: ptr.To[int32](80)}},
		Endpoints: []discoveryv1.Endpoint{{
			Addresses: []string{"10.0.0.1"}, Hostname: ptr.To("h"), NodeName: ptr.To("n"), Zone: ptr.To("z"),
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)},
			TargetRef:  &corev1.ObjectReference{Kind: "Pod", Name: "p"},
		}},
	}
	got, err := DataPlaneSlice("keep", "absent")(in)
	if err != nil {
		t.Fatal(err)
	}
	out := got.(*discoveryv1.EndpointSlice)
	want := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name: "web.east.ipv4-0", Namespace: "ns", ResourceVersion: "7",
			Labels: map[string]string{discoveryv1.LabelServiceName: "web"}, Annotations: map[string]string{"keep": "1"},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Port: ptr.To[int32](80)}},
		Endpoints: []discoveryv1.Endpoint{{
			Addresses: []string{"10.0.0.1"}, Hostname: ptr.To("h"), NodeName: ptr.To("n"), Zone: ptr.To("z"),
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)},
		}},
	}
	if !equality.Semantic.DeepEqual(out, want) {
		t.Fatalf("got %+v\nwant %+v", out, want)
	}
	if _, err := DataPlaneSlice()(&corev1.ConfigMap{}); err != nil {
		t.Fatalf("another kind: %v", err)
	}
}
