package sliceapply

import (
	"context"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	discoveryv1 "k8s.io/api/discovery/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
)

func slice(name string, family discoveryv1.AddressType, addrs ...string) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}, AddressType: family}
	for _, a := range addrs {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{a}})
	}
	return s
}

type recorded struct {
	mu  sync.Mutex
	ops []string
}

func (r *recorded) wrote(op string, s *discoveryv1.EndpointSlice) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ops = append(r.ops, op+" "+s.Name)
}

func (r *recorded) sorted() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := slices.Clone(r.ops)
	sort.Strings(out)
	return out
}

func applier(client *fake.Clientset, r *recorded) Applier {
	return Applier{
		Client: client,
		What:   "EndpointSlice",
		UpToDate: func(have, want *discoveryv1.EndpointSlice) bool {
			return apiequality.Semantic.DeepEqual(have.Endpoints, want.Endpoints)
		},
		Update: func(have, want *discoveryv1.EndpointSlice) *discoveryv1.EndpointSlice {
			upd := have.DeepCopy()
			upd.Endpoints = want.Endpoints
			return upd
		},
		Wrote: r.wrote,
	}
}

func TestApply(t *testing.T) {
	ctx := context.Background()
	same := slice("same", discoveryv1.AddressTypeIPv4, "10.0.0.1")
	changed := slice("changed", discoveryv1.AddressTypeIPv4, "10.0.0.2")
	extra := slice("extra", discoveryv1.AddressTypeIPv4, "10.0.0.3")
	refamilied := slice("refamilied", discoveryv1.AddressTypeIPv4, "10.0.0.4")
	client := fake.NewClientset(same, changed, extra, refamilied)
	r := &recorded{}
	want := []*discoveryv1.EndpointSlice{
		slice("same", discoveryv1.AddressTypeIPv4, "10.0.0.1"),
		slice("changed", discoveryv1.AddressTypeIPv4, "10.0.0.22"),
		slice("new", discoveryv1.AddressTypeIPv4, "10.0.0.5"),
		slice("refamilied", discoveryv1.AddressTypeIPv6, "fd00::4"),
	}
	have := []*discoveryv1.EndpointSlice{same, changed, extra, refamilied}
	if err := applier(client, r).Apply(ctx, "ns", want, have, false); err != nil {
		t.Fatal(err)
	}
	if got, exp := r.sorted(), []string{"create new", "delete extra", "delete refamilied", "update changed"}; !slices.Equal(got, exp) {
		t.Fatalf("writes %v, want %v", got, exp)
	}
	got, err := client.DiscoveryV1().EndpointSlices("ns").Get(ctx, "changed", metav1.GetOptions{})
	if err != nil || got.Endpoints[0].Addresses[0] != "10.0.0.22" {
		t.Fatalf("changed is %v (%v)", got, err)
	}

	t.Run("extras are kept when asked", func(t *testing.T) {
		client := fake.NewClientset(extra)
		r := &recorded{}
		if err := applier(client, r).Apply(ctx, "ns", nil, []*discoveryv1.EndpointSlice{extra}, true); err != nil {
			t.Fatal(err)
		}
		if len(r.sorted()) != 0 {
			t.Fatalf("writes %v, want none", r.sorted())
		}
	})

	t.Run("a slice the cache did not know of yet is read and brought up to date", func(t *testing.T) {
		stale := slice("behind", discoveryv1.AddressTypeIPv4, "10.0.0.9")
		client := fake.NewClientset(stale)
		r := &recorded{}
		err := applier(client, r).Apply(ctx, "ns", []*discoveryv1.EndpointSlice{slice("behind", discoveryv1.AddressTypeIPv4, "10.0.0.10")}, nil, false)
		if err != nil {
			t.Fatal(err)
		}
		if got := r.sorted(); !slices.Equal(got, []string{"update behind"}) {
			t.Fatalf("writes %v, want the stale slice updated", got)
		}
		current := slice("current", discoveryv1.AddressTypeIPv4, "10.0.0.11")
		client = fake.NewClientset(current)
		r = &recorded{}
		if err := applier(client, r).Apply(ctx, "ns", []*discoveryv1.EndpointSlice{current.DeepCopy()}, nil, false); err != nil {
			t.Fatal(err)
		}
		if got := r.sorted(); !slices.Equal(got, []string{"found current"}) {
			t.Fatalf("writes %v, want the slice found up to date", got)
		}
	})

	t.Run("a failed write is an error naming the slice; the others are made", func(t *testing.T) {
		client := fake.NewClientset()
		client.PrependReactor("create", "endpointslices", func(a clienttesting.Action) (bool, runtime.Object, error) {
			if a.(clienttesting.CreateAction).GetObject().(*discoveryv1.EndpointSlice).Name == "bad" {
				return true, nil, context.DeadlineExceeded
			}
			return false, nil, nil
		})
		r := &recorded{}
		err := applier(client, r).Apply(ctx, "ns", []*discoveryv1.EndpointSlice{slice("bad", discoveryv1.AddressTypeIPv4), slice("good", discoveryv1.AddressTypeIPv4)}, nil, false)
		if err == nil || !strings.Contains(err.Error(), "creating EndpointSlice ns/bad") {
			t.Fatalf("error %v, want one naming ns/bad", err)
		}
		if got := r.sorted(); !slices.Equal(got, []string{"create good"}) {
			t.Fatalf("writes %v", got)
		}
	})
}
