package testenv

import (
	"os"
	"testing"
)

// RunWithFakeClientsets is a TestMain for a package whose tests run
// informers on fake clientsets: it turns off client-go's watch-list
// streaming before any informer starts (the fakes, the mcs-api one among
// them, never send the bookmark an informer then waits for; real API
// servers need nothing of the kind), runs the tests and exits.
func RunWithFakeClientsets(m *testing.M) {
	if err := os.Setenv("KUBE_FEATURE_WatchListClient", "false"); err != nil {
		panic(err)
	}
	os.Exit(m.Run())
}
