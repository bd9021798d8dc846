package e2e_test

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/mcsd-io/mcsd/test/lib/fixture"
	"github.com/mcsd-io/mcsd/test/lib/harness"
)

// BenchmarkExportToReachable measures, with real mcsd processes, how long a
// new export of cluster2 takes to become resolvable by name from a pod of
// cluster1 (through cluster1's mcsd DNS) and, independently, reachable
// through its ClusterSetIP (through cluster1's proxier: a prober learns the
// ClusterSetIP from cluster1's ServiceImport and connects until it answers).
// The gap is reachable minus resolvable: at most zero when DNS never hands
// out a name before it routes. A connection is also made the moment the
// name resolves, as a client would; the failures of those are counted.
// Services are exported one at a time; PROPAGATION_BENCH_SERVICES sets how
// many (default 50).
func BenchmarkExportToReachable(b *testing.B) {
	n := 50
	if v, err := strconv.Atoi(os.Getenv("PROPAGATION_BENCH_SERVICES")); err == nil && v > 0 {
		n = v
	}
	cs := harness.Start(b, harness.Options{Clusters: 2})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	members := fixture.Join(b, cs)
	var daemons []*fixture.Daemon
	for _, m := range members {
		node, err := m.AddNode(ctx)
		if err != nil {
			b.Fatal(err)
		}
		daemons = append(daemons, fixture.StartDaemon(b, cs, m, node, fixture.DaemonOptions{}))
		if _, err := m.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "bench"}}, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	for i := range 2 {
		if _, err := daemons[1].Node.AddPod(ctx, harness.PodSpec{Namespace: "bench", Name: fmt.Sprintf("backend-%d", i), Labels: map[string]string{"app": "backend"}}); err != nil {
			b.Fatal(err)
		}
	}
	client, err := daemons[0].Node.AddPod(ctx, harness.PodSpec{Namespace: "bench", Name: "client"})
	if err != nil {
		b.Fatal(err)
	}
	c1, c2 := members[0], members[1]

	var resolved, reachable, gaps []time.Duration
	atOnceFailed := 0
	b.ResetTimer()
	for range b.N {
		resolved, reachable, gaps, atOnceFailed = resolved[:0], reachable[:0], gaps[:0], 0
		for i := range n {
			name := fmt.Sprintf("svc-%d-%d", time.Now().UnixNano()%1e6, i)
			svc := fixture.WebService("bench", name, "backend")
			if _, err := c2.Kube.CoreV1().Services("bench").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
				b.Fatal(err)
			}
			w, err := c1.MCS.MulticlusterV1beta1().ServiceImports("bench").Watch(ctx, metav1.ListOptions{
				FieldSelector: fields.OneTermEqualSelector("metadata.name", name).String(),
				// From the watch cache as it is: a watch from "now" waits
				// for the cache to prove it is current, which etcd 3.4
				// cannot help it do.
				ResourceVersion: "0",
			})
			if err != nil {
				b.Fatal(err)
			}
			start := time.Now()
			if _, err := c2.MCS.MulticlusterV1beta1().ServiceExports("bench").Create(ctx, &mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: "bench", Name: name}}, metav1.CreateOptions{}); err != nil {
				b.Fatal(err)
			}
			probed := make(chan time.Duration, 1)
			go func() { probed <- benchProbe(b, ctx, w, client, name).Sub(start) }()
			vip, sent := benchResolve(b, ctx, client, daemons[0].DNS, name+".bench.svc.clusterset.local")
			resolvedAfter := sent.Sub(start)
			if !benchConnect(ctx, client, vip, 2*time.Second) {
				atOnceFailed++
			}
			reachableAfter := <-probed
			resolved = append(resolved, resolvedAfter)
			reachable = append(reachable, reachableAfter)
			gaps = append(gaps, reachableAfter-resolvedAfter)
		}
	}
	b.StopTimer()
	for _, m := range []struct {
		what, unit string
		d          []time.Duration
	}{{"resolvable", "resolvable", resolved}, {"reachable", "reachable", reachable}, {"resolvable-to-reachable gap", "gap", gaps}} {
		p50, p99 := propagationPercentile(m.d, 50), propagationPercentile(m.d, 99)
		b.ReportMetric(p50.Seconds()*1000, "ms-"+m.unit+"-p50")
		b.ReportMetric(p99.Seconds()*1000, "ms-"+m.unit+"-p99")
		fmt.Printf("export -> %s in another cluster over %d services: p50 %v, p99 %v, max %v\n", m.what, len(m.d), p50.Round(100*time.Microsecond), p99.Round(100*time.Microsecond), slices.Max(m.d).Round(100*time.Microsecond))
	}
	b.ReportMetric(float64(atOnceFailed), "connect-at-once-failures")
	fmt.Printf("connections made the moment the name resolved that failed: %d of %d\n", atOnceFailed, len(resolved))
}

// benchProbe learns name's ClusterSetIP by watching cluster c's
// ServiceImports (as fast as mcsd's own informers learn it) and connects to
// it from client in short attempts until one answers; it returns when that
// attempt began. benchResolve's time is also when its successful query was
// sent, so both err on the same side.
func benchProbe(b *testing.B, ctx context.Context, w watch.Interface, client *harness.Pod, name string) time.Time {
	defer w.Stop()
	var vip netip.Addr
	for ev := range w.ResultChan() {
		si, ok := ev.Object.(*mcsv1beta1.ServiceImport)
		if !ok || len(si.Spec.IPs) == 0 {
			continue
		}
		var err error
		if vip, err = netip.ParseAddr(si.Spec.IPs[0]); err == nil {
			break
		}
	}
	if !vip.IsValid() {
		b.Errorf("%s: the watch of its ServiceImport ended without a ClusterSetIP", name)
		return time.Now()
	}
	// A SYN to a ClusterSetIP not programmed yet is not answered, so an
	// attempt that fails takes its whole timeout: attempts overlap, one
	// starting every probeEvery, and the earliest start of one that
	// succeeded is when the ClusterSetIP was reachable.
	const probeEvery, attempt = 2 * time.Millisecond, 20 * time.Millisecond
	succeeded := make(chan time.Time, int(attempt/probeEvery)+1)
	var inFlight sync.WaitGroup
	ticker := time.NewTicker(probeEvery)
	defer ticker.Stop()
	var first time.Time
	for first.IsZero() && ctx.Err() == nil {
		select {
		case first = <-succeeded:
		case <-ticker.C:
			inFlight.Add(1)
			go func() {
				defer inFlight.Done()
				began := time.Now()
				if benchConnect(ctx, client, vip, attempt) {
					succeeded <- began
				}
			}()
		}
	}
	inFlight.Wait()
	close(succeeded)
	for t := range succeeded {
		if t.Before(first) {
			first = t
		}
	}
	if first.IsZero() {
		b.Errorf("%s: %s:80 never reachable", name, vip)
		return time.Now()
	}
	return first
}

func benchConnect(ctx context.Context, client *harness.Pod, vip netip.Addr, within time.Duration) bool {
	askCtx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	_, err := client.Ask(askCtx, "tcp", netip.AddrPortFrom(vip, 80).String())
	return err == nil
}

// benchResolve asks server from client for name's A record until one
// comes, and returns it with when the query that got it was sent.
func benchResolve(b *testing.B, ctx context.Context, client *harness.Pod, server netip.AddrPort, name string) (netip.Addr, time.Time) {
	b.Helper()
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		sent := time.Now()
		q := new(dns.Msg)
		q.SetQuestion(dns.Fqdn(name), dns.TypeA)
		var in *dns.Msg
		err := client.NS.Do(func() (err error) {
			in, _, err = (&dns.Client{Timeout: time.Second}).Exchange(q, server.String())
			return err
		})
		if err == nil {
			for _, rr := range in.Answer {
				if a, ok := rr.(*dns.A); ok {
					addr, _ := netip.AddrFromSlice(a.A.To4())
					return addr, sent
				}
			}
		}
		if ctx.Err() != nil {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	b.Fatalf("%s did not resolve within a minute", name)
	return netip.Addr{}, time.Time{}
}

func propagationPercentile(d []time.Duration, p int) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	i := (len(s)*p + 99) / 100
	return s[min(max(i-1, 0), len(s)-1)]
}
