package corefile

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// block is the server block mcsd adds, as manifests.CoreDNSServerBlock
// renders it.
const block = `clusterset.local 243.in-addr.arpa 4.6.3.7.3.6.d.6.a.7.d.f.ip6.arpa {
    errors
    cache 5
    forward . 10.96.0.53
}
`

func read(t *testing.T, name string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func TestSetAndRemoveOnRealCorefiles(t *testing.T) {
	for _, name := range []string{"kubeadm.corefile", "k3s.corefile", "eks.corefile", "aks.corefile", "nodelocaldns.corefile"} {
		t.Run(name, func(t *testing.T) {
			original := read(t, name)
			joined, err := Set(original, "clusterset.local", block)
			if err != nil {
				t.Fatal(err)
			}
			if joined != original+block {
				t.Fatalf("the block was not appended to the Corefile, byte for byte:\n%s", joined)
			}
			again, err := Set(joined, "clusterset.local", block)
			if err != nil {
				t.Fatal(err)
			}
			if again != joined {
				t.Fatalf("setting the block twice changed the Corefile:\n%s", again)
			}
			targets, err := Forwards(joined, "clusterset.local")
			if err != nil || !slices.Equal(targets, []string{"10.96.0.53"}) {
				t.Fatalf("forwards %v, %v", targets, err)
			}
			left, removed, err := Remove(joined, "clusterset.local")
			if err != nil || !removed {
				t.Fatalf("removed %v, %v", removed, err)
			}
			if left != original {
				t.Fatalf("removing the block did not give back the Corefile:\n%s", left)
			}
			if _, removed, _ := Remove(original, "clusterset.local"); removed {
				t.Fatal("removed a block the Corefile does not have")
			}
		})
	}
}

func TestSetReplacesAStaleBlockInPlace(t *testing.T) {
	stale := strings.Replace(block, "10.96.0.53", "10.96.0.99", 1)
	before := "# operator's comment\n.:53 {\n    forward . /etc/resolv.conf\n}\n" + stale + "example.org {\n    whoami\n}\n"
	got, err := Set(before, "clusterset.local", block)
	if err != nil {
		t.Fatal(err)
	}
	want := "# operator's comment\n.:53 {\n    forward . /etc/resolv.conf\n}\n" + block + "example.org {\n    whoami\n}\n"
	if got != want {
		t.Fatalf("got:\n%s\nwant:\n%s", got, want)
	}
}

func TestSetNeverDuplicatesAZone(t *testing.T) {
	for name, corefile := range map[string]string{
		"a block keyed with a port and a trailing dot": ".:53 {\n}\nclusterset.local.:53 {\n    forward . 1.2.3.4\n}\n",
		"a block keyed with a scheme":                  "dns://clusterset.local {\n    forward . 1.2.3.4\n}\n.:53 {\n}\n",
	} {
		t.Run(name, func(t *testing.T) {
			got, err := Set(corefile, "clusterset.local", block)
			if err != nil {
				t.Fatal(err)
			}
			if n := strings.Count(got, "clusterset.local"); n != 1 {
				t.Fatalf("%d blocks of clusterset.local:\n%s", n, got)
			}
		})
	}
	if _, err := Set(".:53 {\n}\nclusterset.local {\n}\nclusterset.local:53 {\n}\n", "clusterset.local", block); err == nil {
		t.Fatal("a Corefile that already serves the zone twice was edited")
	}
}

func TestAFileWithoutATrailingNewlineGetsOne(t *testing.T) {
	got, err := Set(".:53 {\n    errors\n}", "clusterset.local", block)
	if err != nil {
		t.Fatal(err)
	}
	if got != ".:53 {\n    errors\n}\n"+block {
		t.Fatalf("got:\n%q", got)
	}
}

func TestUnbalancedBracesAreRefused(t *testing.T) {
	for _, c := range []string{".:53 {\n    errors\n", ".:53 {\n}\n}\n"} {
		if _, err := Set(c, "clusterset.local", block); err == nil {
			t.Errorf("%q accepted", c)
		}
	}
}

func TestImports(t *testing.T) {
	for name, want := range map[string][]string{
		"k3s.corefile":     {"/etc/coredns/custom/*.server"},
		"aks.corefile":     {"custom/*.server"},
		"kubeadm.corefile": nil,
	} {
		got, err := Imports(read(t, name))
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("%s: imports %q, %v; want %q", name, got, err, want)
		}
	}
}

func TestDeriveANodeLocalDNSCacheBlock(t *testing.T) {
	nodelocal := read(t, "nodelocaldns.corefile")
	domain, ok, err := ClusterDomain(nodelocal)
	if err != nil || !ok || domain != "cluster.local" {
		t.Fatalf("cluster domain %q %v %v", domain, ok, err)
	}
	derived, err := Derive(nodelocal, domain, "clusterset.local")
	if err != nil {
		t.Fatal(err)
	}
	want := `clusterset.local:53 {
    errors
    cache {
            success 9984 30
            denial 9984 5
    }
    reload
    loop
    bind 169.254.20.10 10.96.0.10
    forward . __PILLAR__CLUSTER__DNS__ {
            force_tcp
    }
    prometheus :9253
    }
`
	if derived != want {
		t.Fatalf("derived:\n%s\nwant:\n%s", derived, want)
	}
	joined, err := Set(nodelocal, "clusterset.local", derived)
	if err != nil {
		t.Fatal(err)
	}
	if joined != nodelocal+derived {
		t.Fatalf("the derived block was not appended:\n%s", joined)
	}
	// The health plugin with a block of its own goes whole.
	derived, err = Derive(read(t, "kubeadm.corefile"), ".", "clusterset.local")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(derived, "health") || strings.Contains(derived, "lameduck") || !strings.HasPrefix(derived, "clusterset.local:53 {\n    errors\n    ready\n") {
		t.Fatalf("derived:\n%s", derived)
	}
}

func TestZone(t *testing.T) {
	for key, want := range map[string]string{
		".:53": ".", "cluster.local:53": "cluster.local", "dns://Clusterset.Local.:53": "clusterset.local",
		"clusterset.local": "clusterset.local", "243.in-addr.arpa": "243.in-addr.arpa", ".": ".",
	} {
		if got := Zone(key); got != want {
			t.Errorf("Zone(%q) = %q, want %q", key, got, want)
		}
	}
}
