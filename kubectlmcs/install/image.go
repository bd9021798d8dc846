package install

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/mcsd-io/mcsd/internal/version"
)

// ShippedImage is the image repository the chart names by default.
const ShippedImage = "ghcr.io/mcsd-io/mcsd"

// DevelopmentImage is what the chart installs when nothing names an image:
// ShippedImage tagged with the version of an unstamped build (the chart's
// appVersion). No registry has it.
const DevelopmentImage = ShippedImage + ":" + version.Unstamped

// DefaultImage is the image of the mcsd that matches this build of
// kubectl-mcs: ShippedImage tagged with its version.
func DefaultImage() string { return ShippedImage + ":" + version.Get().Version }

// release is a version a release is tagged with: vMAJOR.MINOR.PATCH,
// nothing after it (git describe adds -N-gHASH past a tag, -dirty for
// uncommitted changes).
var release = regexp.MustCompile(`^v\d+\.\d+\.\d+$`)

// CheckImage refuses an image reference that cannot exist, before join
// writes anything: the unstamped development default, and the default of
// a build that is not a release (clientVersion, this kubectl-mcs's), whose
// tag no registry publishes. Otherwise the first sign would be
// ImagePullBackOff on every node. fromDefault says nobody named ref.
func CheckImage(ref string, fromDefault bool, clientVersion string) error {
	howTo := "build mcsd's image (make image), put it where the member's nodes pull it, and give it with --image (or the values image.repository and image.tag)"
	switch {
	case ref == DevelopmentImage:
		return fmt.Errorf("image %s is the default of an unstamped development build, which no registry has: %s", ref, howTo)
	case fromDefault && !release.MatchString(clientVersion):
		return fmt.Errorf("no image given, and this kubectl-mcs is a development build (version %s): no registry publishes %s; %s", clientVersion, ref, howTo)
	}
	return nil
}

// SplitImage splits a reference into the chart's image.repository and
// image.tag, which the chart joins with a colon: the tag is what follows
// the last colon after the last slash ("latest" when there is none, as a
// container runtime reads it); with a digest (name@sha256:hex) the tag is
// the digest's hex and the repository ends in "@sha256", which renders the
// same reference.
func SplitImage(ref string) (repository, tag string) {
	i := strings.LastIndex(ref, ":")
	if i < 0 || i < strings.LastIndex(ref, "/") {
		return ref, "latest"
	}
	return ref[:i], ref[i+1:]
}

// Images are the distinct images of the mcsd containers of objs'
// workloads.
func Images(objs []*unstructured.Unstructured) []string {
	var out []string
	for _, obj := range objs {
		if obj.GetKind() != "DaemonSet" && obj.GetKind() != "Deployment" {
			continue
		}
		containers, _, _ := unstructured.NestedSlice(obj.Object, "spec", "template", "spec", "containers")
		for _, c := range containers {
			m, ok := c.(map[string]any)
			if !ok || m["name"] != "mcsd" {
				continue
			}
			if image, _ := m["image"].(string); !slices.Contains(out, image) {
				out = append(out, image)
			}
		}
	}
	return out
}
