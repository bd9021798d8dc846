package e2e_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/mcsd-io/mcsd/liveness"
	"github.com/mcsd-io/mcsd/mcsslice"
	"github.com/mcsd-io/mcsd/test/lib/fixture"
	"github.com/mcsd-io/mcsd/test/lib/harness"
	"github.com/mcsd-io/mcsd/test/lib/hold"
)

// faultSite is a broker and two clusters, each with one node running mcsd,
// one backend of the service web.faults in each cluster, and a client pod
// in cluster1.
type faultSite struct {
	t       *testing.T
	ctx     context.Context
	cs      *harness.ClusterSet
	members []*fixture.Member
	daemons []*fixture.Daemon
	client  *harness.Pod
	ttl     time.Duration
}

const faultNamespace = "faults"

func newFaultSite(t *testing.T) *faultSite {
	cs := harness.Start(t, harness.Options{Clusters: 2})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	t.Cleanup(cancel)
	s := &faultSite{t: t, ctx: ctx, cs: cs, members: fixture.Join(t, cs), ttl: 6 * time.Second}
	for _, m := range s.members {
		node, err := m.AddNode(ctx)
		if err != nil {
			t.Fatal(err)
		}
		s.daemons = append(s.daemons, fixture.StartDaemon(t, cs, m, node, fixture.DaemonOptions{
			LeaseDuration: 3 * time.Second, ClusterTTL: s.ttl,
			// Short enough that a flushed table is noticed within the test.
			Args: []string{"--proxier-sync-period=2s"},
		}))
		createFaultNamespace(t, ctx, m.Cluster, faultNamespace)
		if _, err := node.AddPod(ctx, harness.PodSpec{Namespace: faultNamespace, Name: "web-" + m.ID, Labels: map[string]string{"app": "web"}}); err != nil {
			t.Fatal(err)
		}
		svc := fixture.WebService(faultNamespace, "web", "web")
		if _, err := m.Kube.CoreV1().Services(faultNamespace).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := m.MCS.MulticlusterV1beta1().ServiceExports(faultNamespace).Create(ctx, &mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: faultNamespace, Name: "web"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	var err error
	if s.client, err = s.daemons[0].Node.AddPod(ctx, harness.PodSpec{Namespace: faultNamespace, Name: "client"}); err != nil {
		t.Fatal(err)
	}
	return s
}

func createFaultNamespace(t *testing.T, ctx context.Context, c *harness.Cluster, name string) {
	t.Helper()
	if _, err := c.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// resolve asks cluster1's mcsd, from the client pod, for the A records of
// name and returns them once there are some.
func (s *faultSite) resolve(name string, within time.Duration) []netip.Addr {
	s.t.Helper()
	var addrs []netip.Addr
	var last string
	err := wait.PollUntilContextTimeout(s.ctx, 100*time.Millisecond, within, true, func(context.Context) (bool, error) {
		addrs, last = nil, ""
		q := new(dns.Msg)
		q.SetQuestion(dns.Fqdn(name), dns.TypeA)
		var in *dns.Msg
		err := s.client.NS.Do(func() (err error) {
			in, _, err = (&dns.Client{Net: "udp", Timeout: time.Second}).Exchange(q, s.daemons[0].DNS.String())
			return err
		})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		last = dns.RcodeToString[in.Rcode]
		for _, rr := range in.Answer {
			if a, ok := rr.(*dns.A); ok {
				addr, _ := netip.AddrFromSlice(a.A.To4())
				addrs = append(addrs, addr)
			}
		}
		return len(addrs) > 0, nil
	})
	if err != nil {
		s.t.Fatalf("%s did not resolve within %v (last answer: %s)", name, within, last)
	}
	return addrs
}

// clustersReached connects n times to vip:80 from the client pod and
// returns how often each cluster answered; failed connections count under "".
func (s *faultSite) clustersReached(vip netip.Addr, n int) map[string]int {
	s.t.Helper()
	seen := map[string]int{}
	for range n {
		ctx, cancel := context.WithTimeout(s.ctx, 2*time.Second)
		id, err := s.client.Ask(ctx, "tcp", netip.AddrPortFrom(vip, 80).String())
		cancel()
		if err != nil {
			seen[""]++
			continue
		}
		seen[id.Cluster]++
	}
	return seen
}

// reachAtOnce connects to vip:80 once, right after it resolved: a name
// mcsd's DNS hands out is already reachable, so this must not fail.
func (s *faultSite) reachAtOnce(name string, vip netip.Addr) {
	s.t.Helper()
	if seen := s.clustersReached(vip, 1); seen[""] > 0 {
		s.t.Fatalf("%s resolved to %s, and the connection made at once failed", name, vip)
	}
}

// waitReach waits until connections to vip reach exactly the given clusters.
func (s *faultSite) waitReach(vip netip.Addr, within time.Duration, clusters ...string) {
	s.t.Helper()
	var seen map[string]int
	err := wait.PollUntilContextTimeout(s.ctx, 200*time.Millisecond, within, true, func(context.Context) (bool, error) {
		seen = s.clustersReached(vip, 20)
		if len(seen) != len(clusters) {
			return false, nil
		}
		for _, c := range clusters {
			if seen[c] == 0 {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		s.t.Fatalf("connections to %s:80 reached %v, want exactly %v", vip, seen, clusters)
	}
}

// importedEndpoints returns, per source cluster, the ready endpoint
// addresses of cluster c's imported EndpointSlices of web.
func (s *faultSite) importedEndpoints(c *harness.Cluster) (map[string][]string, error) {
	list, err := c.Kube.DiscoveryV1().EndpointSlices(faultNamespace).List(s.ctx, metav1.ListOptions{
		LabelSelector: mcsv1beta1.LabelServiceName + "=web," + discoveryv1.LabelManagedBy + "=" + mcsslice.Manager,
	})
	if err != nil {
		return nil, err
	}
	out := map[string][]string{}
	for _, es := range list.Items {
		for _, ep := range es.Endpoints {
			if ep.Conditions.Ready == nil || *ep.Conditions.Ready {
				src := es.Labels[mcsv1beta1.LabelSourceCluster]
				out[src] = append(out[src], ep.Addresses...)
			}
		}
	}
	return out, nil
}

// waitEndpointsOf waits until cluster c imports endpoints of source (or none
// of it, when present is false) and returns how long that took.
func (s *faultSite) waitEndpointsOf(c *harness.Cluster, source string, present bool, within time.Duration) time.Duration {
	s.t.Helper()
	start := time.Now()
	var got map[string][]string
	err := wait.PollUntilContextTimeout(s.ctx, 50*time.Millisecond, within, true, func(context.Context) (bool, error) {
		var err error
		if got, err = s.importedEndpoints(c); err != nil {
			return false, nil
		}
		return (len(got[source]) > 0) == present, nil
	})
	if err != nil {
		s.t.Fatalf("%s: endpoints of %s present=%v not reached within %v; imported endpoints: %v", c.Name, source, present, within, got)
	}
	return time.Since(start)
}

func (s *faultSite) serviceImport(c *harness.Cluster) (*mcsv1beta1.ServiceImport, error) {
	return c.MCS.MulticlusterV1beta1().ServiceImports(faultNamespace).Get(s.ctx, "web", metav1.GetOptions{})
}

// TestFaults breaks one part of the clusterset at a time, with real mcsd
// processes, and checks that nothing is lost: the stale-cluster TTL, an mcsd
// restart under an open connection, a flushed nftables table, and a broker
// outage.
func TestFaults(t *testing.T) {
	s := newFaultSite(t)
	name := "web." + faultNamespace + ".svc.clusterset.local"
	vips := s.resolve(name, time.Minute)
	if len(vips) != 1 {
		t.Fatalf("%s resolves to %v, want one ClusterSetIP", name, vips)
	}
	vip := vips[0]
	s.reachAtOnce(name, vip)
	s.waitReach(vip, time.Minute, "cluster1", "cluster2")
	t.Logf("%s is %s and reaches both clusters", name, vip)

	t.Run("step 1: a cluster whose mcsd stops leaves the others within TTL + 2 s and comes back when it restarts", func(t *testing.T) {
		s.t = t
		if err := s.daemons[1].Terminate(10 * time.Second); err != nil {
			t.Fatal(err)
		}
		stopped := time.Now()
		s.waitEndpointsOf(s.members[0].Cluster, "cluster2", false, s.ttl+2*time.Second)
		t.Logf("cluster2's endpoints left cluster1 %v after its mcsd stopped (TTL %v)", time.Since(stopped).Round(10*time.Millisecond), s.ttl)
		s.waitReach(vip, 30*time.Second, "cluster1")
		si, err := s.serviceImport(s.members[0].Cluster)
		if err != nil {
			t.Fatalf("the ServiceImport must stay while cluster2's record exists: %v", err)
		}
		if len(si.Spec.IPs) != 1 || si.Spec.IPs[0] != vip.String() {
			t.Fatalf("ServiceImport IPs %v while cluster2 is gone, want [%s]", si.Spec.IPs, vip)
		}

		if err := s.daemons[1].Restart(); err != nil {
			t.Fatal(err)
		}
		restarted := time.Now()
		if err := s.daemons[1].WaitReady(s.ctx); err != nil {
			t.Fatal(err)
		}
		s.waitEndpointsOf(s.members[0].Cluster, "cluster2", true, time.Minute)
		t.Logf("cluster2's endpoints were back in cluster1 %v after its mcsd restarted", time.Since(restarted).Round(10*time.Millisecond))
		s.waitReach(vip, 30*time.Second, "cluster1", "cluster2")
	})

	t.Run("step 2: an open TCP connection through the ClusterSetIP survives an mcsd restart, and the VIP stays", func(t *testing.T) {
		s.t = t
		conn, err := s.client.Dial(s.ctx, "tcp", netip.AddrPortFrom(vip, 80).String())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		r := bufio.NewReader(conn)
		first := faultReadLine(t, conn, r)
		if err := s.daemons[0].Terminate(10 * time.Second); err != nil {
			t.Fatal(err)
		}
		if out, err := s.daemons[0].Node.NS.Exec("nft", "list", "table", "ip", "mcsd"); err != nil || !strings.Contains(out, vip.String()) {
			t.Fatalf("the nftables table must stay while mcsd is stopped: %v\n%s", err, out)
		}
		if got := faultAsk(t, conn, r); got != first {
			t.Fatalf("with mcsd stopped the connection answered %q, before %q", got, first)
		}
		if err := s.daemons[0].Restart(); err != nil {
			t.Fatal(err)
		}
		if err := s.daemons[0].WaitReady(s.ctx); err != nil {
			t.Fatal(err)
		}
		// Ready means the restarted proxier has made its first sync: its
		// DNS server, gated on what the proxier carries, is not ready
		// before.
		if got := faultAsk(t, conn, r); got != first {
			t.Fatalf("after the restart the connection answered %q, before %q", got, first)
		}
		if again := s.resolve(name, 30*time.Second); len(again) != 1 || again[0] != vip {
			t.Fatalf("after the restart %s resolves to %v, want %s", name, again, vip)
		}
	})

	t.Run("step 3: an nftables table flushed by hand is restored within the sync period", func(t *testing.T) {
		s.t = t
		if out, err := s.daemons[0].Node.NS.Exec("nft", "flush", "table", "ip", "mcsd"); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		flushed := time.Now()
		s.waitReach(vip, 30*time.Second, "cluster1", "cluster2")
		t.Logf("traffic to the ClusterSetIP flowed again %v after the flush", time.Since(flushed).Round(10*time.Millisecond))
	})

	t.Run("step 4: the broker down for 60 s loses nothing, and a change made meanwhile arrives after", func(t *testing.T) {
		s.t = t
		c1, c2 := s.members[0], s.members[1]
		s.cs.Broker.StopAPIServer()
		down := time.Now()
		restarted := false
		defer func() {
			if !restarted {
				_ = s.cs.Broker.StartAPIServer(context.Background())
			}
		}()
		// A change the broker cannot hear of yet.
		late := fixture.WebService(faultNamespace, "late", "web")
		if _, err := c2.Kube.CoreV1().Services(faultNamespace).Create(s.ctx, late, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := c2.MCS.MulticlusterV1beta1().ServiceExports(faultNamespace).Create(s.ctx, &mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: faultNamespace, Name: "late"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		sawUnreachable := false
		if err := hold.For(s.ctx, 60*time.Second-time.Since(down), 5*time.Second, func(context.Context) error {
			si, err := s.serviceImport(c1.Cluster)
			if err != nil {
				return fmt.Errorf("%v into the outage the ServiceImport is gone: %w", time.Since(down).Round(time.Second), err)
			}
			if len(si.Spec.IPs) != 1 || si.Spec.IPs[0] != vip.String() {
				return fmt.Errorf("during the outage the ServiceImport's IPs are %v, want [%s]", si.Spec.IPs, vip)
			}
			if cm, err := c1.Kube.CoreV1().ConfigMaps(liveness.DefaultNamespace).Get(s.ctx, liveness.ConfigMapName, metav1.GetOptions{}); err == nil && !liveness.Read(cm).BrokerReachable {
				sawUnreachable = true
			}
			eps, err := s.importedEndpoints(c1.Cluster)
			if err != nil || len(eps["cluster1"]) == 0 || len(eps["cluster2"]) == 0 {
				return fmt.Errorf("%v into the outage cluster1 imports endpoints %v (%v), want both clusters'", time.Since(down).Round(time.Second), eps, err)
			}
			if seen := s.clustersReached(vip, 10); seen[""] > 0 {
				return fmt.Errorf("%v into the outage connections failed: %v", time.Since(down).Round(time.Second), seen)
			}
			return nil
		}); err != nil {
			t.Fatalf("during the broker outage: %v", err)
		}
		if !sawUnreachable {
			t.Errorf("the liveness ConfigMap %s never said the broker was unreachable during the outage", liveness.ConfigMapName)
		}
		if err := s.cs.Broker.StartAPIServer(s.ctx); err != nil {
			t.Fatal(err)
		}
		restarted = true
		back := time.Now()
		lateName := "late." + faultNamespace + ".svc.clusterset.local"
		lateVIPs := s.resolve(lateName, 2*time.Minute)
		t.Logf("the export made during the outage resolved in cluster1 %v after the broker came back", time.Since(back).Round(10*time.Millisecond))
		s.reachAtOnce(lateName, lateVIPs[0])
		s.waitReach(lateVIPs[0], time.Minute, "cluster2")
		err := wait.PollUntilContextTimeout(s.ctx, 200*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
			si, err := s.serviceImport(c1.Cluster)
			if err != nil {
				return false, nil
			}
			c := meta.FindStatusCondition(si.Status.Conditions, string(mcsv1beta1.ServiceImportConditionReady))
			return c != nil && c.Status == metav1.ConditionTrue, nil
		})
		if err != nil {
			t.Fatalf("the ServiceImport's Ready condition did not recover after the broker came back")
		}
		s.waitReach(vip, time.Minute, "cluster1", "cluster2")
	})

	t.Run("step 5: a leader killed without releasing its election leaves its cluster live: a standby renews the heartbeat until it leads", func(t *testing.T) {
		s.t = t
		c2 := s.members[1]
		node, err := c2.AddNode(s.ctx)
		if err != nil {
			t.Fatal(err)
		}
		// A second replica of cluster2's controllers, with mcsd's default
		// election timings: once it leads, its Lease says 15 s, and a
		// standby waits that long after its death, well past the TTL of
		// cluster1's importer.
		replica := fixture.StartDaemon(t, s.cs, c2, node, fixture.DaemonOptions{
			LeaseDuration: 3 * time.Second, ClusterTTL: s.ttl, Name: "mcsd-cluster2-replica",
			Args: []string{"--leader-elect-lease-duration=15s", "--leader-elect-renew-deadline=10s", "--leader-elect-retry-period=2s"},
		})
		first := s.daemons[1]
		if err := first.Terminate(10 * time.Second); err != nil {
			t.Fatal(err)
		}
		s.waitLeader(c2, node.Name)
		if err := first.Restart(); err != nil {
			t.Fatal(err)
		}
		if err := first.WaitReady(s.ctx); err != nil {
			t.Fatal(err)
		}

		const dropped = "mcsd_importer_cluster_dropped_total"
		before, _, err := metricValue(s.ctx, s.daemons[0], dropped, `cluster="cluster2"`)
		if err != nil {
			t.Fatal(err)
		}
		replica.Kill()
		killed := time.Now()
		if err := metricReaches(s.ctx, first, "mcsd_exporter_lease_renewals_total", `result="standby"`, 1); err != nil {
			t.Fatalf("the standby never renewed cluster2's Lease after the leader was killed: %v", err)
		}
		took := s.waitLeader(c2, first.Node.Name).Sub(killed)
		// The new leader's own heartbeat runs now; one TTL more shows that
		// no gap opened at the handover either.
		if err := hold.For(s.ctx, s.ttl, 500*time.Millisecond, func(context.Context) error {
			eps, err := s.importedEndpoints(s.members[0].Cluster)
			if err != nil || len(eps["cluster2"]) == 0 {
				return fmt.Errorf("cluster1 imports endpoints %v (%v), want cluster2's", eps, err)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		after, _, err := metricValue(s.ctx, s.daemons[0], dropped, `cluster="cluster2"`)
		if err != nil {
			t.Fatal(err)
		}
		if after != before {
			t.Fatalf("cluster1 dropped cluster2 %v times while its leader changed, want none", after-before)
		}
		t.Logf("the standby led %v after the leader was killed; cluster2 stayed live in cluster1 (TTL %v)", took.Round(10*time.Millisecond), s.ttl)
	})
}

// waitLeader waits until the controllers' election Lease of c is held by
// the mcsd of node, and returns when it saw it.
func (s *faultSite) waitLeader(c *fixture.Member, node string) time.Time {
	s.t.Helper()
	var holder string
	var at time.Time
	err := wait.PollUntilContextTimeout(s.ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		l, err := c.Kube.CoordinationV1().Leases("mcsd-system").Get(ctx, "mcsd-controllers", metav1.GetOptions{})
		if err != nil || l.Spec.HolderIdentity == nil {
			return false, nil
		}
		holder, at = *l.Spec.HolderIdentity, time.Now()
		return strings.HasPrefix(holder, node+"_"), nil
	})
	if err != nil {
		s.t.Fatalf("%s: the mcsd of %s never took the election (holder %q): %v", c.ID, node, holder, err)
	}
	return at
}

func faultReadLine(t *testing.T, conn net.Conn, r *bufio.Reader) string {
	t.Helper()
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	line, err := r.ReadString('\n')
	if err != nil {
		t.Fatalf("reading from %s: %v", conn.RemoteAddr(), err)
	}
	return strings.TrimSpace(line)
}

func faultAsk(t *testing.T, conn net.Conn, r *bufio.Reader) string {
	t.Helper()
	if _, err := fmt.Fprintln(conn, "who"); err != nil {
		t.Fatalf("writing to %s: %v", conn.RemoteAddr(), err)
	}
	return faultReadLine(t, conn, r)
}
