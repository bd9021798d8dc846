package e2e_test

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/mcsd-io/mcsd/test/fixture"
	"github.com/mcsd-io/mcsd/test/harness"
)

// BenchmarkExportToReachable measures, with real mcsd processes, how long a
// new export of cluster2 takes to become resolvable by name from a pod of
// cluster1 (through cluster1's mcsd DNS) and then reachable through its
// ClusterSetIP (through cluster1's proxier). Services are exported one at a
// time; PROPAGATION_BENCH_SERVICES sets how many (default 50).
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
	c2 := members[1]

	var resolved, reachable []time.Duration
	b.ResetTimer()
	for range b.N {
		resolved, reachable = resolved[:0], reachable[:0]
		for i := range n {
			name := fmt.Sprintf("svc-%d-%d", time.Now().UnixNano()%1e6, i)
			svc := fixture.WebService("bench", name, "backend")
			if _, err := c2.Kube.CoreV1().Services("bench").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
				b.Fatal(err)
			}
			start := time.Now()
			if _, err := c2.MCS.MulticlusterV1beta1().ServiceExports("bench").Create(ctx, &mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: "bench", Name: name}}, metav1.CreateOptions{}); err != nil {
				b.Fatal(err)
			}
			vip := benchResolve(b, ctx, client, daemons[0].DNS, name+".bench.svc.clusterset.local")
			resolved = append(resolved, time.Since(start))
			benchReach(b, ctx, client, vip)
			reachable = append(reachable, time.Since(start))
		}
	}
	b.StopTimer()
	for _, m := range []struct {
		what string
		d    []time.Duration
	}{{"resolvable", resolved}, {"reachable", reachable}} {
		p50, p99 := propagationPercentile(m.d, 50), propagationPercentile(m.d, 99)
		b.ReportMetric(p50.Seconds()*1000, "ms-"+m.what+"-p50")
		b.ReportMetric(p99.Seconds()*1000, "ms-"+m.what+"-p99")
		fmt.Printf("export -> %s in another cluster over %d services: p50 %v, p99 %v\n", m.what, len(m.d), p50.Round(time.Millisecond), p99.Round(time.Millisecond))
	}
}

func benchResolve(b *testing.B, ctx context.Context, client *harness.Pod, server netip.AddrPort, name string) netip.Addr {
	b.Helper()
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
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
					return addr
				}
			}
		}
		if ctx.Err() != nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	b.Fatalf("%s did not resolve within a minute", name)
	return netip.Addr{}
}

func benchReach(b *testing.B, ctx context.Context, client *harness.Pod, vip netip.Addr) {
	b.Helper()
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		// Short attempts: a SYN to a ClusterSetIP not programmed yet is
		// not answered, and a long attempt would hide when it became one.
		askCtx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		_, err := client.Ask(askCtx, "tcp", netip.AddrPortFrom(vip, 80).String())
		cancel()
		if err == nil {
			return
		}
	}
	b.Fatalf("%s:80 not reachable within a minute", vip)
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
