package charts_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/mcsd-io/mcsd/charts"
	"github.com/mcsd-io/mcsd/test/lib/fixture"
)

// The README's kustomize overlay and the chart's values for the same
// settings give the same objects, field for field: an operator may take
// either path.
func TestReadmeOverlayIsTheChartWithValues(t *testing.T) {
	fs := filesys.MakeFsInMemory()
	files, err := filepath.Glob(filepath.Join("..", "manifests", "mcsd", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := fs.WriteFile(filepath.Join("/m/mcsd", filepath.Base(f)), data); err != nil {
			t.Fatal(err)
		}
	}
	if err := fs.WriteFile("/m/member/kustomization.yaml", []byte(fixture.MemberOverlay("../mcsd", "registry.example.com/mcsd", "v1", "10.244.0.0/16"))); err != nil {
		t.Fatal(err)
	}
	built, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(fs, "/m/member")
	if err != nil {
		t.Fatal(err)
	}
	text, err := built.AsYaml()
	if err != nil {
		t.Fatal(err)
	}
	fromKustomize, err := charts.Documents(text)
	if err != nil {
		t.Fatal(err)
	}
	fromChart, err := charts.Renderer{ManagedBy: charts.ManifestsManager}.Objects(charts.ManifestsNamespace, map[string]any{
		"namespace": map[string]any{"create": true},
		"image":     map[string]any{"repository": "registry.example.com/mcsd", "tag": "v1"},
		"podCIDRs":  []any{"10.244.0.0/16"},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := byKey(t, fromKustomize)
	got := byKey(t, fromChart)
	if len(want) < 15 {
		t.Fatalf("kustomize built only %d objects", len(want))
	}
	for key, w := range want {
		g, ok := got[key]
		if !ok {
			t.Errorf("%s: built by kustomize, not rendered by the chart", key)
			continue
		}
		if diff := cmp.Diff(w, g); diff != "" {
			t.Errorf("%s differs (-kustomize +chart):\n%s", key, diff)
		}
	}
	for key := range got {
		if _, ok := want[key]; !ok {
			t.Errorf("%s: rendered by the chart, not built by kustomize", key)
		}
	}
}

// byKey indexes objects by kind, namespace and name, each as plain JSON
// values so that both decoders compare alike.
func byKey(t *testing.T, objs []*unstructured.Unstructured) map[string]map[string]any {
	t.Helper()
	out := map[string]map[string]any{}
	for _, o := range objs {
		data, err := json.Marshal(o.Object)
		if err != nil {
			t.Fatal(err)
		}
		var plain map[string]any
		if err := json.Unmarshal(data, &plain); err != nil {
			t.Fatal(err)
		}
		sortEnv(plain)
		out[strings.Join([]string{o.GetKind(), o.GetNamespace(), o.GetName()}, "/")] = plain
	}
	return out
}

// sortEnv orders every container's env by name: kustomize's strategic
// merge moves a patched variable to the front, an order nothing here
// depends on (the arguments refer to the variables, no variable to
// another).
func sortEnv(v any) {
	switch v := v.(type) {
	case map[string]any:
		for k, child := range v {
			if env, ok := child.([]any); ok && k == "env" {
				slices.SortFunc(env, func(a, b any) int {
					return strings.Compare(a.(map[string]any)["name"].(string), b.(map[string]any)["name"].(string))
				})
			}
			sortEnv(child)
		}
	case []any:
		for _, child := range v {
			sortEnv(child)
		}
	}
}
