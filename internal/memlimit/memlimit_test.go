package memlimit

import (
	"os"
	"path/filepath"
	"runtime/debug"
	"testing"
)

// fakeCgroups writes a cgroup filesystem under a temporary root with the
// given files, and a /proc/self/cgroup naming self, and returns both paths.
func fakeCgroups(t *testing.T, self string, files map[string]string) (root, selfCgroup string) {
	t.Helper()
	root = t.TempDir()
	for path, content := range files {
		p := filepath.Join(root, path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	selfCgroup = filepath.Join(t.TempDir(), "cgroup")
	if err := os.WriteFile(selfCgroup, []byte(self), 0o644); err != nil {
		t.Fatal(err)
	}
	return root, selfCgroup
}

func TestCgroupLimit(t *testing.T) {
	for _, tc := range []struct {
		name  string
		self  string
		files map[string]string
		want  int64
	}{
		{"v2 in a container", "0::/\n", map[string]string{"memory.max": "268435456\n"}, 268435456},
		{"v2 without a limit", "0::/\n", map[string]string{"memory.max": "max\n"}, 0},
		{"v2 at a path", "0::/kubepods/pod1/c1\n", map[string]string{"kubepods/pod1/c1/memory.max": "536870912\n"}, 536870912},
		{"v1 memory controller", "4:memory:/kubepods/c1\n0::/\n", map[string]string{"memory/kubepods/c1/memory.limit_in_bytes": "536870912\n"}, 536870912},
		{"v1 joined controllers", "3:cpu,memory:/\n", map[string]string{"memory/memory.limit_in_bytes": "1073741824\n"}, 1073741824},
		{"v1 unlimited", "4:memory:/\n", map[string]string{"memory/memory.limit_in_bytes": "9223372036854771712\n"}, 0},
		{"hybrid, the limit in v1", "4:memory:/c1\n0::/\n", map[string]string{"unified/memory.max": "max\n", "memory/c1/memory.limit_in_bytes": "104857600\n"}, 104857600},
		{"unreadable value", "0::/\n", map[string]string{"memory.max": "lots\n"}, 0},
		{"no files", "0::/\n", nil, 0},
	} {
		root, self := fakeCgroups(t, tc.self, tc.files)
		if got := cgroupLimit(root, self); got != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, got, tc.want)
		}
	}
}

func TestSet(t *testing.T) {
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(-1))
	empty := t.TempDir() // no cgroup files: the environment decides

	t.Setenv("MCSD_MEMORY_LIMIT", "1000000000")
	limit, source, err := Set(empty)
	if err != nil || source != FromDownwardAPI || limit != 900000000 || debug.SetMemoryLimit(-1) != 900000000 {
		t.Fatalf("from MCSD_MEMORY_LIMIT: %d %q %v, want 90%% of it applied", limit, source, err)
	}

	t.Setenv("MCSD_MEMORY_LIMIT", "1Gi")
	if _, _, err := Set(empty); err == nil {
		t.Fatal("MCSD_MEMORY_LIMIT=1Gi: no error, want one naming the variable")
	}

	// An explicit GOMEMLIMIT wins: whatever the runtime has is kept.
	debug.SetMemoryLimit(123456789)
	t.Setenv("GOMEMLIMIT", "123456789")
	t.Setenv("MCSD_MEMORY_LIMIT", "1000000000")
	limit, source, err = Set(empty)
	if err != nil || source != FromEnvironment || limit != 123456789 {
		t.Fatalf("with GOMEMLIMIT: %d %q %v, want the runtime's limit kept", limit, source, err)
	}
}
