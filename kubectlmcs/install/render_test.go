package install

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

func TestObjectsRenderTheMembersSettings(t *testing.T) {
	s := Settings{
		ClusterID:       "east",
		PodCIDRs:        []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix("fd00:10:244::/56")},
		IPFamilies:      []corev1.IPFamily{corev1.IPv4Protocol},
		ClusterSetCIDRs: []netip.Prefix{netip.MustParsePrefix("10.250.0.0/16"), netip.MustParsePrefix("fd00:250::/48")},
		Image:           "registry.example/mcsd:v1.2.3",
	}
	objs, err := Objects(s)
	if err != nil {
		t.Fatal(err)
	}
	shipped, err := Shipped()
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) != len(shipped) || objs[0].GetKind() != "Namespace" {
		t.Fatalf("rendered %d objects, first %s; shipped %d, want the namespace first", len(objs), objs[0].GetKind(), len(shipped))
	}
	want := map[string][]string{
		"DaemonSet":  {"--cluster-id=east", "--ip-families=IPv4", "--clusterset-cidrs=10.250.0.0/16"},
		"Deployment": {"--cluster-id=east", "--ip-families=IPv4"},
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
		if obj.GetKind() == "Deployment" && slices.ContainsFunc(got, func(a string) bool { return strings.HasPrefix(a, "--clusterset-cidrs") }) {
			t.Errorf("the controller is given the ranges it reads from the broker: %q", got)
		}
		if obj.GetKind() == "DaemonSet" {
			env, _, _ := unstructured.NestedSlice(c, "env")
			found := false
			for _, e := range env {
				if m := e.(map[string]any); m["name"] == "POD_CIDRS" {
					found = m["value"] == "10.244.0.0/16,fd00:10:244::/56"
				}
			}
			if !found {
				t.Errorf("POD_CIDRS not the member's: %v", env)
			}
		}
	}
	if len(want) > 0 {
		t.Errorf("not rendered: %v", want)
	}
	// The shipped objects are untouched by rendering.
	for _, obj := range shipped {
		if obj.GetKind() == "DaemonSet" && container(t, obj)["image"] != ShippedImage+":v0.0.0-dev" {
			t.Errorf("shipped image changed: %v", container(t, obj)["image"])
		}
	}
}

func TestObjectsRefusesMissingSettings(t *testing.T) {
	if _, err := Objects(Settings{ClusterID: "east"}); err == nil || !strings.Contains(err.Error(), "image") {
		t.Fatalf("Objects without an image or families: %v", err)
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
