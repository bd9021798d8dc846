package netns

import (
	"fmt"
	"os"
	"testing"
)

// ForTest creates a namespace named "<prefix><pid>-<name>" whose addresses
// are usable at once (no duplicate address detection), and deletes it when
// the test ends.
func ForTest(t testing.TB, prefix, name string) *NS {
	t.Helper()
	ns, err := New(fmt.Sprintf("%s%d-%s", prefix, os.Getpid(), name))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := ns.Delete(); err != nil {
			t.Error(err)
		}
	})
	for _, key := range []string{"net.ipv6.conf.all.accept_dad", "net.ipv6.conf.default.accept_dad"} {
		if err := ns.Sysctl(key, "0"); err != nil {
			t.Fatal(err)
		}
	}
	return ns
}
