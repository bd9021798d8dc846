package dnsgate

import (
	"os"
	"testing"
)

// The mcs-api fake clientset predates watch lists: its informers would wait
// for a bookmark that never comes.
func TestMain(m *testing.M) {
	if err := os.Setenv("KUBE_FEATURE_WatchListClient", "false"); err != nil {
		panic(err)
	}
	os.Exit(m.Run())
}
