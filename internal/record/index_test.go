package record

import (
	"testing"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
)

func TestServiceIndex(t *testing.T) {
	labelled := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: "s", Labels: Labels("east", "shop", "cart")}}
	for _, tc := range []struct {
		name string
		obj  any
		want []string
	}{
		{"an object with both service labels is indexed by them", labelled, []string{"shop/cart"}},
		{"a deletion seen late is indexed as the object was", cache.DeletedFinalStateUnknown{Key: "x/s", Obj: labelled}, []string{"shop/cart"}},
		{"an object without the namespace label is not indexed", &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{LabelServiceName: "cart"}}}, nil},
		{"something that is not an object is not indexed", "not an object", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ServiceIndex(tc.obj)
			if err != nil || len(got) != len(tc.want) || (len(got) == 1 && got[0] != tc.want[0]) {
				t.Fatalf("ServiceIndex = %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}
