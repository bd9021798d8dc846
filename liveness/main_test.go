package liveness

import (
	"os"
	"testing"
)

// TestMain turns off client-go's watch-list streaming before any informer
// starts: the fake clientsets never send the bookmark an informer waits
// for. Real API servers need nothing of the kind.
func TestMain(m *testing.M) {
	if err := os.Setenv("KUBE_FEATURE_WatchListClient", "false"); err != nil {
		panic(err)
	}
	os.Exit(m.Run())
}
