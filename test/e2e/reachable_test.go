package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/mcsd-io/mcsd/test/lib/conformance"
	"github.com/mcsd-io/mcsd/test/lib/fixture"
)

// churnServices is how many services TestResolvableMeansReachable exports
// at once.
const churnServices = 40

// TestResolvableMeansReachable exports many services from cluster2 at once
// while a pod of cluster1 asks mcsd's DNS for each name until it resolves,
// and then connects to it at once, without a retry: every one of those
// connections must succeed. mcsd's DNS hands out a ClusterSetIP only after
// the node's proxier carries it with its endpoints.
func TestResolvableMeansReachable(t *testing.T) {
	s := startClusterSet(t)
	e := s.begin(t)
	for i := range 2 {
		e.AddPod(1, conformance.PodSpec{Name: fmt.Sprintf("churn-%d", i), Labels: map[string]string{"app": "churn"}})
	}
	exporter := e.Member(1)

	type outcome struct {
		name     string
		vip      netip.Addr
		resolved time.Duration
		err      error
	}
	outcomes := make([]outcome, churnServices)
	began := time.Now()
	var wg sync.WaitGroup
	for k := range churnServices {
		name := fmt.Sprintf("churn-%02d", k)
		wg.Add(2)
		go func() {
			defer wg.Done()
			if _, err := exporter.Kube.CoreV1().Services(e.Namespace()).Create(e.Ctx(), fixture.WebService(e.Namespace(), name, "churn"), metav1.CreateOptions{}); err != nil {
				t.Errorf("creating Service %s: %v", name, err)
				return
			}
			se := &mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: e.Namespace(), Name: name}}
			if _, err := exporter.MCS.MulticlusterV1beta1().ServiceExports(e.Namespace()).Create(e.Ctx(), se, metav1.CreateOptions{}); err != nil {
				t.Errorf("creating ServiceExport %s: %v", name, err)
			}
		}()
		go func() {
			defer wg.Done()
			outcomes[k] = outcome{name: name}
			fqdn := name + "." + e.Namespace() + ".svc." + conformance.Zone
			var vip netip.Addr
			err := wait.PollUntilContextTimeout(e.Ctx(), 20*time.Millisecond, conformance.AwaitTimeout, true, func(context.Context) (bool, error) {
				m, err := e.Query(0, "udp", fqdn, dns.TypeA)
				if err != nil || m.Rcode != dns.RcodeSuccess {
					return false, nil
				}
				addrs := conformance.Addresses(m)
				if len(addrs) == 0 {
					return false, nil
				}
				vip, err = netip.ParseAddr(addrs[0])
				return err == nil, err
			})
			if err != nil {
				outcomes[k].err = fmt.Errorf("%s did not resolve within %v: %w", fqdn, conformance.AwaitTimeout, err)
				return
			}
			outcomes[k].vip, outcomes[k].resolved = vip, time.Since(began)
			if _, err := e.Connect(0, "tcp", vip, 80); err != nil {
				outcomes[k].err = fmt.Errorf("%s resolved to %s, and the connection made at once failed: %w", fqdn, vip, err)
			}
		}()
	}
	wg.Wait()

	var failures []string
	var resolved []time.Duration
	for _, o := range outcomes {
		if o.err != nil {
			failures = append(failures, o.err.Error())
			continue
		}
		resolved = append(resolved, o.resolved)
	}
	slices.Sort(resolved)
	if len(resolved) > 0 {
		t.Logf("%d services exported at once resolved in cluster1 and were reached at their first connection; resolvable after %v (first) to %v (last)",
			len(resolved), resolved[0].Round(time.Millisecond), resolved[len(resolved)-1].Round(time.Millisecond))
	}
	if len(failures) > 0 {
		t.Fatalf("%d of %d resolve-then-connect attempts failed:\n%s", len(failures), churnServices, "  "+strings.Join(failures, "\n  "))
	}
}
