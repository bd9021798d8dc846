package record

import (
	"strings"
	"testing"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/tools/cache"
)

func TestMemberNamespace(t *testing.T) {
	if got := MemberNamespace("mcsd-broker", "east"); got != "mcsd-broker-east" {
		t.Errorf("MemberNamespace = %q", got)
	}
	long := strings.Repeat("c", 63)
	seen := map[string]bool{}
	for _, c := range []struct{ broker, cluster string }{
		{"mcsd-broker", long}, {"mcsd-broker", long[:62] + "d"}, {"other", long}, {strings.Repeat("b", 63), "east"},
	} {
		got := MemberNamespace(c.broker, c.cluster)
		if errs := validation.IsDNS1123Label(got); len(errs) > 0 {
			t.Errorf("MemberNamespace(%q, %q) = %q: %v", c.broker, c.cluster, got, errs)
		}
		if seen[got] {
			t.Errorf("MemberNamespace(%q, %q) = %q, as another's", c.broker, c.cluster, got)
		}
		seen[got] = true
		if got != MemberNamespace(c.broker, c.cluster) {
			t.Error("MemberNamespace is not stable")
		}
	}
}

func TestOnlyMembersKeepsObjectsInTheirWritersNamespaceOnly(t *testing.T) {
	slice := func(namespace, cluster string) *discoveryv1.EndpointSlice {
		return &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "s", Labels: EndpointSliceLabels(cluster, "shop", "cart")}}
	}
	for _, tc := range []struct {
		name string
		obj  *discoveryv1.EndpointSlice
		kept bool
	}{
		{"in its cluster's namespace", slice("mcsd-broker-east", "east"), true},
		{"in another cluster's namespace", slice("mcsd-broker-west", "east"), false},
		{"in the broker namespace", slice("mcsd-broker", "east"), false},
		{"in another broker's namespace", slice("other-east", "east"), false},
		{"without a cluster", slice("mcsd-broker-", ""), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := InMember("mcsd-broker", tc.obj); got != tc.kept {
				t.Errorf("InMember = %v", got)
			}
			if got := InMember("mcsd-broker", cache.DeletedFinalStateUnknown{Obj: tc.obj}); got != tc.kept {
				t.Errorf("InMember of a tombstone = %v", got)
			}
			out, err := OnlyMembers("mcsd-broker", nil)(tc.obj.DeepCopy())
			if err != nil {
				t.Fatal(err)
			}
			if labelled := len(out.(*discoveryv1.EndpointSlice).Labels) > 0; labelled != tc.kept {
				t.Errorf("labels after the transform: %v", out.(*discoveryv1.EndpointSlice).Labels)
			}
		})
	}
	t.Run("a foreign record decodes to nothing", func(t *testing.T) {
		si := Encode(example())
		si.Namespace = "mcsd-broker"
		out, err := OnlyMembers("mcsd-broker", CacheTransform)(si)
		if err != nil {
			t.Fatal(err)
		}
		if c := out.(*Cached); c.Invalid == nil || len(c.Labels) != 0 || len(c.Export.VIPs) != 0 {
			t.Fatalf("cached %+v", c)
		}
	})
}

func TestARecordBeingDeletedIsGone(t *testing.T) {
	si := Encode(example())
	now := metav1.Now()
	si.DeletionTimestamp = &now
	si.Finalizers = []string{"example.com/keep"}
	if _, err := Decode(si); err == nil || !strings.Contains(err.Error(), "metadata.deletionTimestamp") {
		t.Fatalf("Decode of a record being deleted: %v", err)
	}
}

func TestAMovedRecordKeepsItsPrecedence(t *testing.T) {
	si := Encode(example())
	stored := metav1.Date(2026, 11, 23, 9, 0, 0, 0, time.UTC)
	si.Namespace, si.CreationTimestamp, si.ResourceVersion = "mcsd-broker", stored, "7"
	moved := Moved(si, "mcsd-broker-east")
	if moved.Namespace != "mcsd-broker-east" || moved.ResourceVersion != "" || moved.Name != si.Name {
		t.Fatalf("moved %s/%s rv %q", moved.Namespace, moved.Name, moved.ResourceVersion)
	}
	// Created anew a day later, it still counts from when it was first stored.
	moved.CreationTimestamp = metav1.NewTime(stored.Add(24 * time.Hour))
	if got := Precedence(moved); !got.Equal(&stored) {
		t.Fatalf("precedence of the moved record %v, want %v", got, stored)
	}
	e, err := Decode(moved)
	if err != nil || !e.Created.Equal(&stored) {
		t.Fatalf("decoded %v (%v), want created %v", e.Created, err, stored)
	}
	// Moved again, it keeps the first time.
	if again := Moved(moved, "x"); again.Annotations[AnnotationStored] != moved.Annotations[AnnotationStored] {
		t.Fatalf("moved twice: %v", again.Annotations)
	}
}
