package install

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/mcsd-io/mcsd/charts"
)

func eastSettings() Settings {
	return Settings{
		Namespace:       "mcs",
		ClusterID:       "east",
		PodCIDRs:        []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix("fd00:10:244::/56")},
		IPFamilies:      []corev1.IPFamily{corev1.IPv4Protocol},
		ClusterSetCIDRs: []netip.Prefix{netip.MustParsePrefix("10.250.0.0/16"), netip.MustParsePrefix("fd00:250::/48")},
		Image:           "registry.example/mcsd:v1.2.3",
	}
}

// join installs the chart's objects, rendered with the member's settings
// as values: the same objects helm install gives with those values.
func TestObjectsAreTheChartWithTheMembersValues(t *testing.T) {
	s := eastSettings()
	objs, err := Objects(s)
	if err != nil {
		t.Fatal(err)
	}
	helm, err := charts.Objects("mcs", map[string]any{
		"namespace":       map[string]any{"create": true},
		"clusterID":       "east",
		"podCIDRs":        []any{"10.244.0.0/16", "fd00:10:244::/56"},
		"ipFamilies":      []any{"IPv4"},
		"clustersetCIDRs": []any{"10.250.0.0/16"},
		"image":           map[string]any{"repository": "registry.example/mcsd", "tag": "v1.2.3"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) != len(helm) || objs[0].GetKind() != "Namespace" || objs[0].GetName() != "mcs" {
		t.Fatalf("rendered %d objects, first %s %s; helm %d, want the namespace mcs first", len(objs), objs[0].GetKind(), objs[0].GetName(), len(helm))
	}
	for i := range objs {
		if !equal(objs[i], helm[i]) {
			t.Errorf("%s %s differs from helm's rendering", objs[i].GetKind(), objs[i].GetName())
		}
	}
	want := map[string][]string{
		"DaemonSet":  {"--cluster-id=east", "--ip-families=IPv4", "--clusterset-cidrs=10.250.0.0/16", "--leader-elect-namespace=mcs"},
		"Deployment": {"--cluster-id=east", "--ip-families=IPv4", "--broker-secret=mcs/mcsd-broker"},
	}
	for _, obj := range objs {
		args, ok := want[obj.GetKind()]
		if !ok {
			continue
		}
		delete(want, obj.GetKind())
		c := container(t, obj)
		if c["image"] != s.Image {
			t.Errorf("%s: image %v", obj.GetName(), c["image"])
		}
		got, _, _ := unstructured.NestedStringSlice(c, "args")
		for _, a := range args {
			if !slices.Contains(got, a) {
				t.Errorf("%s: no %s in %q", obj.GetName(), a, got)
			}
		}
	}
	if len(want) > 0 {
		t.Errorf("not rendered: %v", want)
	}
}

// The operator's values reach the objects; those join sets must agree
// with it, and the error names the flag that sets them.
func TestOperatorValues(t *testing.T) {
	s := eastSettings()
	s.Values = map[string]any{"logVerbosity": 4, "controller": map[string]any{"replicas": 3}, "clusterID": "east"}
	objs, err := Objects(s)
	if err != nil {
		t.Fatal(err)
	}
	for _, obj := range objs {
		if obj.GetKind() == "Deployment" {
			if r, _, _ := unstructured.NestedFieldNoCopy(obj.Object, "spec", "replicas"); fmt.Sprint(r) != "3" {
				t.Errorf("controller replicas %v, want the values' 3", r)
			}
			if args, _, _ := unstructured.NestedStringSlice(container(t, obj), "args"); !slices.Contains(args, "--v=4") {
				t.Errorf("controller args %q, want the values' --v=4", args)
			}
		}
	}
	if s.Values["image"] != nil {
		t.Errorf("rendering changed the operator's values: %v", s.Values)
	}
	for name, tc := range map[string]struct {
		values map[string]any
		image  string
		want   string
	}{
		"another cluster ID":        {map[string]any{"clusterID": "west"}, "", "--cluster-id"},
		"other pod CIDRs":           {map[string]any{"podCIDRs": []any{"10.0.0.0/8"}}, "", "--pod-cidrs"},
		"other clusterset ranges":   {map[string]any{"clustersetCIDRs": []any{"10.96.0.0/12"}}, "", "broker"},
		"no namespace":              {map[string]any{"namespace": map[string]any{"create": false}}, "", "namespace.create"},
		"another broker Secret":     {map[string]any{"controller": map[string]any{"brokerSecret": "mine"}}, "", "controller.brokerSecret"},
		"an image and --image":      {map[string]any{"image": map[string]any{"repository": "a/mcsd", "tag": "v1"}}, "b/mcsd:v1", "--image"},
		"a value the chart refuses": {map[string]any{"ports": map[string]any{"dns": "fifty-three"}}, "", "dns"},
	} {
		t.Run(name, func(t *testing.T) {
			s := eastSettings()
			s.Values, s.Image = tc.values, tc.image
			_, err := Objects(s)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Objects: %v, want an error naming %s", err, tc.want)
			}
			t.Log(err)
		})
	}
}

// The image the values name is rendered as it is when --image is not
// given.
func TestValuesImage(t *testing.T) {
	s := eastSettings()
	s.Image = ""
	s.Values = map[string]any{"image": map[string]any{"repository": "registry.example/mine", "tag": "v9"}}
	objs, err := Objects(s)
	if err != nil {
		t.Fatal(err)
	}
	if got := Images(objs); !slices.Equal(got, []string{"registry.example/mine:v9"}) {
		t.Errorf("images %v", got)
	}
	if got := ImageOf(s.Values); got != "registry.example/mine:v9" {
		t.Errorf("ImageOf %q", got)
	}
}

func TestParseValues(t *testing.T) {
	file := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(file, []byte("logVerbosity: 3\ncontroller:\n  replicas: 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	values, err := ParseValues([]string{file}, []string{"logVerbosity=5", "podCIDRs={10.0.0.0/8,fd00::/56}"})
	if err != nil {
		t.Fatal(err)
	}
	if values["logVerbosity"] != int64(5) || len(values["podCIDRs"].([]any)) != 2 || values["controller"].(map[string]any)["replicas"] == nil {
		t.Errorf("values %v: want --set over the file", values)
	}
	if _, err := ParseValues(nil, []string{"replicas"}); err == nil || !strings.Contains(err.Error(), "--set") {
		t.Errorf("a --set that does not parse: %v", err)
	}
	if _, err := ParseValues([]string{"/nonexistent.yaml"}, nil); err == nil || !strings.Contains(err.Error(), "--values") {
		t.Errorf("a --values file that is not there: %v", err)
	}
}

// leave looks for the chart's objects in the namespace mcsd was installed
// in.
func TestShippedIsInTheNamespace(t *testing.T) {
	objs, err := Shipped("mcs")
	if err != nil {
		t.Fatal(err)
	}
	if objs[0].GetKind() != "Namespace" || objs[0].GetName() != "mcs" {
		t.Fatalf("first %s %s, want the namespace mcs", objs[0].GetKind(), objs[0].GetName())
	}
	for _, o := range objs {
		if o.GetKind() == "DaemonSet" && o.GetNamespace() != "mcs" {
			t.Errorf("the node agents in %q", o.GetNamespace())
		}
	}
}

func TestObjectsRefusesMissingSettings(t *testing.T) {
	if _, err := Objects(Settings{ClusterID: "east"}); err == nil || !strings.Contains(err.Error(), "IP families") {
		t.Fatalf("Objects without families: %v", err)
	}
}

func container(t *testing.T, obj *unstructured.Unstructured) map[string]any {
	t.Helper()
	cs, _, _ := unstructured.NestedSlice(obj.Object, "spec", "template", "spec", "containers")
	for _, c := range cs {
		if m := c.(map[string]any); m["name"] == "mcsd" {
			return m
		}
	}
	t.Fatalf("%s %s has no container mcsd", obj.GetKind(), obj.GetName())
	return nil
}

func equal(a, b *unstructured.Unstructured) bool {
	ja, err := a.MarshalJSON()
	if err != nil {
		return false
	}
	jb, err := b.MarshalJSON()
	return err == nil && string(ja) == string(jb)
}
