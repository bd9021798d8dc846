package install

import (
	"strings"
	"testing"

	"github.com/mcsd-io/mcsd/internal/version"
)

func TestCheckImage(t *testing.T) {
	for _, tc := range []struct {
		name          string
		ref           string
		fromDefault   bool
		clientVersion string
		// refused is what the error must say; "" for none.
		refused string
	}{
		{"the unstamped default", DevelopmentImage, true, version.Unstamped, "unstamped"},
		{"the unstamped default, named", DevelopmentImage, false, "v1.0.0", "--image"},
		{"the default of a build past a tag", ShippedImage + ":v0.3.0-4-g1a2b3c4", true, "v0.3.0-4-g1a2b3c4", "development build"},
		{"the default of a build with changes", ShippedImage + ":1a2b3c4-dirty", true, "1a2b3c4-dirty", "--image"},
		{"the default of a release", ShippedImage + ":v0.3.0", true, "v0.3.0", ""},
		{"an image of the operator's, from a development build", "registry.example/mcsd:dev", false, version.Unstamped, ""},
		{"the shipped repository with a tag the operator chose", ShippedImage + ":v0.3.0-4-g1a2b3c4", false, version.Unstamped, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckImage(tc.ref, tc.fromDefault, tc.clientVersion)
			switch {
			case tc.refused == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.refused != "" && (err == nil || !strings.Contains(err.Error(), tc.refused)):
				t.Fatalf("CheckImage: %v, want a refusal saying %q", err, tc.refused)
			case err != nil && !strings.Contains(err.Error(), "--image"):
				t.Fatalf("the refusal names no --image: %v", err)
			}
		})
	}
}

// A reference split into the chart's repository and tag renders as it was.
func TestSplitImage(t *testing.T) {
	for _, tc := range []struct{ ref, repository, tag string }{
		{"registry.example/mcsd:v1", "registry.example/mcsd", "v1"},
		{"localhost:5000/mcsd:v1", "localhost:5000/mcsd", "v1"},
		{"localhost:5000/mcsd", "localhost:5000/mcsd", "latest"},
		{"mcsd", "mcsd", "latest"},
		{"registry.example/mcsd@sha256:0123abcd", "registry.example/mcsd@sha256", "0123abcd"},
		{"registry.example/mcsd:v1@sha256:0123abcd", "registry.example/mcsd:v1@sha256", "0123abcd"},
	} {
		repository, tag := SplitImage(tc.ref)
		if repository != tc.repository || tag != tc.tag {
			t.Errorf("SplitImage(%q) = %q, %q; want %q, %q", tc.ref, repository, tag, tc.repository, tc.tag)
		}
		if tag != "latest" && repository+":"+tag != tc.ref {
			t.Errorf("%q renders as %q", tc.ref, repository+":"+tag)
		}
	}
}
