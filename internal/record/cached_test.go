package record

import (
	"testing"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
)

func TestCacheTransformKeepsTheDecodedRecord(t *testing.T) {
	obj := Encode(example())
	obj.Namespace, obj.ResourceVersion = "mcs-broker", "42"
	got, err := CacheTransform(obj)
	if err != nil {
		t.Fatal(err)
	}
	c, ok := got.(*Cached)
	if !ok {
		t.Fatalf("transformed into %T", got)
	}
	if c.Invalid != nil || !apiequality.Semantic.DeepEqual(c.Export, example()) {
		t.Fatalf("cached %+v (%v), want the example", c.Export, c.Invalid)
	}
	// What caches key and index on.
	m, err := meta.Accessor(c)
	if err != nil || m.GetName() != obj.Name || m.GetNamespace() != "mcs-broker" || m.GetLabels()[LabelSourceCluster] != "east" {
		t.Fatalf("metadata %v (%v)", m, err)
	}
	keys, _ := ServiceIndex(c)
	if len(keys) != 1 || keys[0] != "shop/cart" {
		t.Fatalf("service index %v", keys)
	}
	cp := c.DeepCopyObject().(*Cached)
	cp.Export.Ports[0].Port = 1
	cp.Labels["x"] = "y"
	if c.Export.Ports[0].Port == 1 || c.Labels["x"] == "y" {
		t.Fatal("DeepCopyObject shares memory with the original")
	}

	broken := Encode(example())
	broken.Annotations[AnnotationFormat] = "99"
	got, _ = CacheTransform(broken)
	if c := got.(*Cached); c.Invalid == nil {
		t.Fatal("a record of an unknown format is cached as valid")
	}
	if got, _ := CacheTransform("not a record"); got != "not a record" {
		t.Fatalf("another object became %v", got)
	}
}
