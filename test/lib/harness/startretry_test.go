package harness

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/mcsd-io/mcsd/test/lib/testenv"
)

// testCluster is a control plane built as Up builds one, not started.
func testCluster(t *testing.T) *Cluster {
	t.Helper()
	testenv.RequireRoot(t)
	testenv.RequireCommands(t, "etcd")
	t.Setenv("MCSD_HARNESS_DIR", t.TempDir())
	bins, err := findBinaries()
	if err != nil {
		t.Fatal(err)
	}
	ca, err := newAuthority()
	if err != nil {
		t.Fatal(err)
	}
	c := &Cluster{Name: "retry", dir: filepath.Join(StateBase(), "retry"), ca: ca, bins: bins,
		ServiceCIDR: netip.MustParsePrefix("100.127.0.0/16"), PodCIDR: netip.MustParsePrefix("100.95.0.0/16")}
	t.Cleanup(c.stop)
	return c
}

func TestAFailedControlPlaneStartIsTriedAgainFromScratch(t *testing.T) {
	c := testCluster(t)
	// etcd cannot create its data directory where a file stands: the
	// first attempt fails, and the second, in a clean directory, works.
	if err := os.MkdirAll(c.dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(c.dir, "etcd"), []byte("in the way"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := c.startWithRetries(ctx); err != nil {
		t.Fatalf("the second attempt did not start the control plane: %v", err)
	}
	if _, err := c.Kube.CoreV1().Namespaces().Get(ctx, "kube-system", metav1.GetOptions{}); err != nil {
		t.Fatalf("the API server of the retried start does not answer: %v", err)
	}
}

func TestAControlPlaneThatNeverStartsNamesEveryAttempt(t *testing.T) {
	c := testCluster(t)
	c.bins.etcd = "/bin/false"
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	err := c.startWithRetries(ctx)
	if err == nil {
		t.Fatal("a control plane whose etcd always exits started")
	}
	for _, want := range []string{"attempt 1 of 3", "attempt 2 of 3", "attempt 3 of 3", "retry-etcd not healthy", "exited", "etcd.log"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error does not say %q:\n%v", want, err)
		}
	}
}
