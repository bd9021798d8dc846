package importer

import (
	"encoding/json"
	"maps"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
)

// AnnotationImportedKeys on a ServiceImport lists the label and annotation
// keys the importer set from the exports, as a JSON object
// {"annotations":[...],"labels":[...]}. It lets the importer remove a key
// the exports no longer carry while leaving keys others set alone, and
// marks the ServiceImport as the importer's: it deletes only ServiceImports
// that carry it.
const AnnotationImportedKeys = "mcsd.io/imported-keys"

type importedKeys struct {
	Annotations []string `json:"annotations,omitempty"`
	Labels      []string `json:"labels,omitempty"`
}

// managed reports whether the importer wrote si.
func managed(si *mcsv1beta1.ServiceImport) bool {
	_, ok := si.Annotations[AnnotationImportedKeys]
	return ok
}

// applyMetadata makes m carry exactly the exported labels and annotations
// among the keys the importer owns: it sets every wanted key, removes the
// keys it set before that are no longer wanted, and leaves everyone else's
// keys alone. It reports whether m changed.
func applyMetadata(m *metav1.ObjectMeta, wantLabels, wantAnnotations map[string]string) bool {
	var prev importedKeys
	if v, ok := m.Annotations[AnnotationImportedKeys]; ok {
		// An unreadable list owns nothing: the importer then only adds.
		_ = json.Unmarshal([]byte(v), &prev)
	}
	wantAnnotations = maps.Clone(wantAnnotations)
	delete(wantAnnotations, AnnotationImportedKeys)

	before := m.DeepCopy()
	m.Labels = reconcileKeys(m.Labels, prev.Labels, wantLabels)
	m.Annotations = reconcileKeys(m.Annotations, prev.Annotations, wantAnnotations)
	now := importedKeys{
		Labels:      slices.Sorted(maps.Keys(wantLabels)),
		Annotations: slices.Sorted(maps.Keys(wantAnnotations)),
	}
	b, _ := json.Marshal(now)
	if m.Annotations == nil {
		m.Annotations = map[string]string{}
	}
	m.Annotations[AnnotationImportedKeys] = string(b)
	return !maps.Equal(before.Labels, m.Labels) || !maps.Equal(before.Annotations, m.Annotations)
}

// reconcileKeys returns have with the keys of owned that want lacks removed
// and every key of want set.
func reconcileKeys(have map[string]string, owned []string, want map[string]string) map[string]string {
	out := maps.Clone(have)
	for _, k := range owned {
		if _, ok := want[k]; !ok {
			delete(out, k)
		}
	}
	if out == nil && len(want) > 0 {
		out = map[string]string{}
	}
	maps.Copy(out, want)
	return out
}
