package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/mcsd-io/mcsd/test/fixture"
	"github.com/mcsd-io/mcsd/test/harness"
)

// clusterDNS is a cluster's own DNS, the one that answers cluster.local:
// the pinned CoreDNS with its kubernetes plugin, as kube-dns is deployed,
// reading the member's API server. It listens on loopback beside the API
// server, so it is asked from the test process rather than from a pod.
type clusterDNS struct {
	prog *harness.Program
	addr string
}

// startClusterDNS runs CoreDNS for cluster.local of m and waits until it
// answers from a synced cache.
func startClusterDNS(t *testing.T, cs *harness.ClusterSet, m *fixture.Member) *clusterDNS {
	t.Helper()
	bin, err := coreDNSBinary()
	if err != nil {
		t.Fatalf("the cluster DNS: %v", err)
	}
	port, err := harness.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(cs.Dir, "clusterdns-"+m.ID)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	corefile := fmt.Sprintf(`.:%d {
    bind 127.0.0.1
    kubernetes cluster.local {
        kubeconfig %s
    }
}
`, port, m.KubeconfigPath)
	path := filepath.Join(dir, "Corefile")
	if err := os.WriteFile(path, []byte(corefile), 0o644); err != nil {
		t.Fatal(err)
	}
	prog, err := cs.StartProgram("clusterdns-"+m.ID, bin, "-conf", path)
	if err != nil {
		t.Fatalf("starting CoreDNS: %v", err)
	}
	c := &clusterDNS{prog: prog, addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port))}
	t.Cleanup(func() { _ = prog.Terminate(10 * time.Second) })

	// Until its caches are synced, the kubernetes plugin answers SERVFAIL.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err = wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(context.Context) (bool, error) {
		if done, err := prog.Exited(); done {
			return false, fmt.Errorf("exited: %v", err)
		}
		m, err := c.query("kubernetes.default.svc.cluster.local.", dns.TypeA)
		return err == nil && m.Rcode == dns.RcodeSuccess, nil
	})
	if err != nil {
		t.Fatalf("CoreDNS for %s not answering: %v\n%s", m.ID, err, prog.Tail(30))
	}
	return c
}

func (c *clusterDNS) query(name string, qtype uint16) (*dns.Msg, error) {
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), qtype)
	resp, _, err := (&dns.Client{Net: "udp", Timeout: 2 * time.Second}).Exchange(m, c.addr)
	return resp, err
}

// coreDNSBinary builds (once, cached by version) and returns the pinned
// CoreDNS.
func coreDNSBinary() (string, error) {
	root, err := filepath.Abs("../..")
	if err != nil {
		return "", err
	}
	cache := os.Getenv("MCSD_CACHE")
	if cache == "" {
		cache = filepath.Join(root, ".cache")
	}
	cmd := exec.Command("bash", filepath.Join(root, "test/tools/coredns/build.sh"), filepath.Join(cache, "coredns"))
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("building CoreDNS: %w", err)
	}
	return filepath.Join(strings.TrimSpace(string(out)), "coredns"), nil
}
