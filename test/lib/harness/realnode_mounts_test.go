package harness

import (
	"reflect"
	"testing"
)

// Only the outermost of the paths below a mount's target are bound into
// the node's directory: binding one brings what lies below it along, and
// a sibling that merely shares a prefix is not below it.
func TestOutermostUnder(t *testing.T) {
	for _, tc := range []struct {
		name  string
		dir   string
		paths []string
		want  []string
	}{
		{"nothing below", "/tmp", []string{"/usr/lib/cni", "/work/.cache/k8s", "/tmpfs/x"}, nil},
		{"nested and repeated", "/tmp", []string{"/tmp/a/.cache/k8s/v1", "/tmp/a", "/tmp/a/.cache/containerd/v2", "/tmp/a"}, []string{"/tmp/a"}},
		{"a sibling sharing a prefix", "/tmp", []string{"/tmp/a/b", "/tmp/a-b", "/tmp/a"}, []string{"/tmp/a", "/tmp/a-b"}},
		{"the target itself", "/var/lib", []string{"/var/lib/x", "/var/lib"}, []string{"/var/lib"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := outermostUnder(tc.dir, tc.paths); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("outermostUnder(%s, %v) = %v, want %v", tc.dir, tc.paths, got, tc.want)
			}
		})
	}
}
