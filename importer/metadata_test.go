package importer

import (
	"maps"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
)

func TestApplyMetadata(t *testing.T) {
	m := metav1.ObjectMeta{Labels: map[string]string{"owner": "ops"}, Annotations: map[string]string{"note": "kept"}}
	if !applyMetadata(&m, map[string]string{"tier": "gold"}, map[string]string{"example.com/team": "cart"}) {
		t.Fatal("adding exported keys is a change")
	}
	if !maps.Equal(m.Labels, map[string]string{"owner": "ops", "tier": "gold"}) {
		t.Fatalf("labels %v", m.Labels)
	}
	if m.Annotations["example.com/team"] != "cart" || m.Annotations["note"] != "kept" {
		t.Fatalf("annotations %v", m.Annotations)
	}
	if !managed(&mcsv1beta1.ServiceImport{ObjectMeta: m}) {
		t.Fatal("the importer's bookkeeping annotation is missing")
	}
	if applyMetadata(&m, map[string]string{"tier": "gold"}, map[string]string{"example.com/team": "cart"}) {
		t.Fatal("the same exports changed something")
	}

	t.Run("a hand edit of an exported key is reverted, a key no longer exported is removed, others' keys stay", func(t *testing.T) {
		m := *m.DeepCopy()
		m.Labels["tier"] = "bronze"
		if !applyMetadata(&m, map[string]string{"zone": "a"}, nil) {
			t.Fatal("no change reported")
		}
		if !maps.Equal(m.Labels, map[string]string{"owner": "ops", "zone": "a"}) {
			t.Fatalf("labels %v", m.Labels)
		}
		if _, ok := m.Annotations["example.com/team"]; ok || m.Annotations["note"] != "kept" {
			t.Fatalf("annotations %v", m.Annotations)
		}
	})

	t.Run("a key someone else set is not removed when it was never exported", func(t *testing.T) {
		m := metav1.ObjectMeta{Labels: map[string]string{"tier": "mine"}}
		applyMetadata(&m, nil, nil)
		if m.Labels["tier"] != "mine" {
			t.Fatalf("labels %v", m.Labels)
		}
	})

	t.Run("an exported annotation cannot overwrite the bookkeeping", func(t *testing.T) {
		m := metav1.ObjectMeta{}
		applyMetadata(&m, nil, map[string]string{AnnotationImportedKeys: "forged"})
		if m.Annotations[AnnotationImportedKeys] == "forged" {
			t.Fatal("the bookkeeping annotation was overwritten")
		}
	})
}
