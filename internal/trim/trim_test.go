package trim

import (
	"testing"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
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
