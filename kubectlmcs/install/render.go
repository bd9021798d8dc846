// Package install puts mcsd in a member cluster as kubectl mcs join does:
// the CRDs where they are absent, then manifests/mcsd rendered with the
// member's settings, applied server-side under one field manager so that
// joining again changes nothing and leaving removes exactly those objects.
package install

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net/netip"
	"path"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/mcsd-io/mcsd/internal/version"
	"github.com/mcsd-io/mcsd/manifests"
)

// ShippedImage is the image manifests/mcsd names, without its tag.
const ShippedImage = "ghcr.io/mcsd-io/mcsd"

// DefaultImage is the image of the mcsd that matches this build of
// kubectl-mcs: ShippedImage tagged with its stamped version.
func DefaultImage() string { return ShippedImage + ":" + version.Get().Version }

// Settings are what differs from one member to the next.
type Settings struct {
	// ClusterID is the ID the member joined the broker with.
	ClusterID string
	// PodCIDRs are the member's pod ranges: the node agents masquerade
	// traffic to a ClusterSetIP from outside them.
	PodCIDRs []netip.Prefix
	// IPFamilies are the families the member serves.
	IPFamilies []corev1.IPFamily
	// ClusterSetCIDRs are the broker's clusterset ranges, which the node
	// agents program and answer for without reading the broker.
	ClusterSetCIDRs []netip.Prefix
	// Image is the full reference of mcsd's image.
	Image string
}

// Objects are manifests/mcsd for the member of s, in the order of its
// kustomization.yaml.
func Objects(s Settings) ([]*unstructured.Unstructured, error) {
	if s.ClusterID == "" || s.Image == "" || len(s.IPFamilies) == 0 {
		return nil, fmt.Errorf("rendering manifests/mcsd: a cluster ID, an image and the IP families are needed (got %q, %q, %v)", s.ClusterID, s.Image, s.IPFamilies)
	}
	objs, err := Shipped()
	if err != nil {
		return nil, err
	}
	for _, obj := range objs {
		if err := render(obj, s); err != nil {
			return nil, fmt.Errorf("manifests/mcsd: %s %s: %w", obj.GetKind(), obj.GetName(), err)
		}
	}
	return objs, nil
}

// Shipped are the objects of manifests/mcsd as they are shipped, in the
// order of its kustomization.yaml: what leave looks for.
func Shipped() ([]*unstructured.Unstructured, error) {
	files, err := kustomizationResources()
	if err != nil {
		return nil, err
	}
	var out []*unstructured.Unstructured
	for _, f := range files {
		data, err := manifests.MCSD.ReadFile(path.Join("mcsd", f))
		if err != nil {
			return nil, fmt.Errorf("manifests/mcsd/%s: %w", f, err)
		}
		objs, err := decode(data)
		if err != nil {
			return nil, fmt.Errorf("manifests/mcsd/%s: %w", f, err)
		}
		out = append(out, objs...)
	}
	return out, nil
}

// kustomizationResources are the files manifests/mcsd/kustomization.yaml
// lists: a plain list, which is all the base uses of kustomize.
func kustomizationResources() ([]string, error) {
	data, err := manifests.MCSD.ReadFile("mcsd/kustomization.yaml")
	if err != nil {
		return nil, err
	}
	var k struct {
		Resources []string `json:"resources"`
		Images    []any    `json:"images"`
		Patches   []any    `json:"patches"`
	}
	if err := yaml.Unmarshal(data, &k); err != nil {
		return nil, fmt.Errorf("manifests/mcsd/kustomization.yaml: %w", err)
	}
	if len(k.Images) > 0 || len(k.Patches) > 0 {
		return nil, fmt.Errorf("manifests/mcsd/kustomization.yaml has images or patches, which join does not render: keep them in overlays")
	}
	return k.Resources, nil
}

// decode splits a multi-document YAML file into objects.
func decode(data []byte) ([]*unstructured.Unstructured, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var out []*unstructured.Unstructured
	for {
		doc, err := r.Read()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		obj := &unstructured.Unstructured{}
		if err := yaml.Unmarshal(doc, &obj.Object); err != nil {
			return nil, err
		}
		if len(obj.Object) > 0 {
			out = append(out, obj)
		}
	}
}

// render gives obj the member's settings: the image of every container,
// and the node agents' and controllers' flags that say what this member
// is.
func render(obj *unstructured.Unstructured, s Settings) error {
	if obj.GetKind() != "DaemonSet" && obj.GetKind() != "Deployment" {
		return nil
	}
	containers, _, err := unstructured.NestedSlice(obj.Object, "spec", "template", "spec", "containers")
	if err != nil {
		return err
	}
	families := make([]string, len(s.IPFamilies))
	for i, f := range s.IPFamilies {
		families[i] = string(f)
	}
	args := []any{"--cluster-id=" + s.ClusterID, "--ip-families=" + strings.Join(families, ",")}
	if obj.GetKind() == "DaemonSet" && len(s.ClusterSetCIDRs) > 0 {
		// The controllers read the ranges from the broker; the node agents
		// hold no broker credential, so they are told.
		// Only those of the member's families: a member may serve fewer
		// than the broker.
		var served []netip.Prefix
		for _, p := range s.ClusterSetCIDRs {
			if slices.Contains(s.IPFamilies, familyOf(p)) {
				served = append(served, p)
			}
		}
		args = append(args, "--clusterset-cidrs="+joinPrefixes(served))
	}
	for i, c := range containers {
		m, ok := c.(map[string]any)
		if !ok || m["name"] != "mcsd" {
			continue
		}
		m["image"] = s.Image
		prev, _, _ := unstructured.NestedSlice(m, "args")
		m["args"] = append(prev, args...)
		if obj.GetKind() == "DaemonSet" {
			setEnv(m, "POD_CIDRS", joinPrefixes(s.PodCIDRs))
		}
		containers[i] = m
	}
	return unstructured.SetNestedSlice(obj.Object, containers, "spec", "template", "spec", "containers")
}

// setEnv sets the value of the container's variable name, which the
// manifest declares.
func setEnv(container map[string]any, name, value string) {
	env, _, _ := unstructured.NestedSlice(container, "env")
	for _, e := range env {
		if m, ok := e.(map[string]any); ok && m["name"] == name {
			m["value"] = value
		}
	}
	container["env"] = env
}

func joinPrefixes(ps []netip.Prefix) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.String()
	}
	return strings.Join(s, ",")
}

func familyOf(p netip.Prefix) corev1.IPFamily {
	if p.Addr().Is4() {
		return corev1.IPv4Protocol
	}
	return corev1.IPv6Protocol
}
