package version

import (
	"strings"
	"testing"
)

func TestSkew(t *testing.T) {
	for _, tc := range []struct {
		name     string
		versions map[string]string
		// want are strings the one warning must have; none for no
		// warning.
		want []string
	}{
		{"one version everywhere", map[string]string{"east": "v0.3.0", "west": "v0.3.0"}, nil},
		{"one minor version apart, patches aside", map[string]string{"east": "v0.3.2", "west": "v0.2.0", "north": "v0.3.0"}, nil},
		{"a build past a tag is that tag's", map[string]string{"east": "v0.3.0-4-g1a2b3c4", "west": "v0.2.1"}, nil},
		{"two minor versions apart names the oldest and the newest", map[string]string{"east": "v0.3.0", "west": "v0.1.5", "north": "v0.2.0"},
			[]string{"west runs v0.1.5 and east runs v0.3.0", "supported skew of 1 minor version"}},
		{"a major version apart", map[string]string{"east": "v1.0.0", "west": "v0.9.0"}, []string{"west runs v0.9.0 and east runs v1.0.0"}},
		{"untagged builds that differ", map[string]string{"east": "1a2b3c4", "west": "v0.2.0"}, []string{"east (1a2b3c4)", "cannot be judged"}},
		{"one untagged build everywhere", map[string]string{"east": "1a2b3c4", "west": "1a2b3c4"}, nil},
		{"unknown and development builds are not judged", map[string]string{"east": "", "west": Unstamped, "north": "v0.9.0"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Skew(tc.versions)
			if tc.want == nil {
				if len(got) != 0 {
					t.Fatalf("warned %q", got)
				}
				return
			}
			if len(got) != 1 {
				t.Fatalf("warnings %q, want one", got)
			}
			for _, w := range tc.want {
				if !strings.Contains(got[0], w) {
					t.Errorf("warning %q does not say %q", got[0], w)
				}
			}
		})
	}
}
