// Command demo shows mcsd end to end on this machine: a broker and two
// member clusters of real Kubernetes control planes on loopback, one mcsd
// per cluster with its data plane in a node's network namespace, an app
// exported from cluster2 and reached from a pod in cluster1 by its
// clusterset name and ClusterSetIP, then scaled into cluster1 too. It stays
// up for exploring until Ctrl-C, then removes everything it made.
//
//	go run ./test/cmd/demo   (as root; `make demo` builds what it needs first)
package main

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/mcsd-io/mcsd/test/lib/fixture"
	"github.com/mcsd-io/mcsd/test/lib/harness"
)

const (
	appNamespace = "demo"
	appName      = "hello"
)

func main() {
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "demo: run as root: it creates network namespaces and nftables tables")
		os.Exit(2)
	}
	// The control planes' client logs would drown the story.
	klog.SetOutput(discard{})
	klog.LogToStderr(false)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx); err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintln(os.Stderr, "\ndemo failed:", err)
		os.Exit(1)
	}
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

func step(format string, args ...any) { fmt.Printf("\n==> "+format+"\n", args...) }
func done(format string, args ...any) { fmt.Printf("    "+format+"\n", args...) }

func run(ctx context.Context) error {
	began := time.Now()
	step("Starting a broker and two member clusters (etcd + kube-apiserver + kube-controller-manager each)")
	cs, err := harness.Up(ctx, harness.Options{Clusters: 2})
	if err != nil {
		return err
	}
	defer func() {
		fmt.Println("\nStopping and cleaning up...")
		cs.Close()
		fmt.Println("Done: no process, network namespace or file of the demo is left.")
	}()
	for _, c := range cs.All() {
		done("%-9s %s  kubeconfig %s", c.Name, c.Server(), c.KubeconfigPath)
	}

	step("Joining both clusters to the broker and starting one mcsd per cluster")
	members, err := fixture.JoinMembers(ctx, cs)
	if err != nil {
		return err
	}
	var daemons []*fixture.Daemon
	for _, m := range members {
		node, err := m.AddNode(ctx)
		if err != nil {
			return err
		}
		d, err := fixture.RunDaemon(ctx, cs, m, node, fixture.DaemonOptions{})
		if err != nil {
			return err
		}
		daemons = append(daemons, d)
		done("%s: mcsd on node %s (netns %s), DNS %s, log %s", m.ID, node.Name, node.NS.Name, d.DNS, d.LogPath())
	}
	c1, c2 := members[0], members[1]
	for _, m := range members {
		if _, err := m.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: appNamespace}}, metav1.CreateOptions{}); err != nil {
			return err
		}
	}

	step("Deploying %s in cluster2 (two pods and a Service) and exporting it", appName)
	for i := 1; i <= 2; i++ {
		if _, err := daemons[1].Node.AddPod(ctx, harness.PodSpec{Namespace: appNamespace, Name: fmt.Sprintf("%s-%d", appName, i), Labels: map[string]string{"app": appName}}); err != nil {
			return err
		}
	}
	svc := fixture.WebService(appNamespace, appName, appName)
	for _, m := range members {
		if _, err := m.Kube.CoreV1().Services(appNamespace).Create(ctx, svc.DeepCopy(), metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	exported := time.Now()
	if _, err := c2.MCS.MulticlusterV1beta1().ServiceExports(appNamespace).Create(ctx, &mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: appNamespace, Name: appName}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	done("kubectl --kubeconfig %s -n %s get serviceexport %s", c2.KubeconfigPath, appNamespace, appName)

	client, err := daemons[0].Node.AddPod(ctx, harness.PodSpec{Namespace: appNamespace, Name: "client"})
	if err != nil {
		return err
	}
	fqdn := fmt.Sprintf("%s.%s.svc.clusterset.local", appName, appNamespace)
	step("Resolving %s from pod %s/client in cluster1 through mcsd's DNS (%s)", fqdn, appNamespace, daemons[0].DNS)
	var vip netip.Addr
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		addrs, err := lookupA(client, daemons[0].DNS, fqdn)
		if err != nil || len(addrs) == 0 {
			return false, nil
		}
		vip = addrs[0]
		return true, nil
	}); err != nil {
		return fmt.Errorf("%s did not resolve: %w", fqdn, err)
	}
	done("%s -> %s (the ClusterSetIP), %v after the export", fqdn, vip, time.Since(exported).Round(10*time.Millisecond))

	step("Connecting from cluster1's client pod to %s:80", vip)
	seen, err := reach(ctx, client, vip, 20)
	if err != nil {
		return err
	}
	done("20 connections answered by: %s", seen)

	step("Scaling %s into cluster1 too (one pod there) and exporting it from cluster1", appName)
	if _, err := daemons[0].Node.AddPod(ctx, harness.PodSpec{Namespace: appNamespace, Name: appName + "-3", Labels: map[string]string{"app": appName}}); err != nil {
		return err
	}
	if _, err := c1.MCS.MulticlusterV1beta1().ServiceExports(appNamespace).Create(ctx, &mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: appNamespace, Name: appName}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	if err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		seen, err = reach(ctx, client, vip, 30)
		return err == nil && strings.Contains(seen, "cluster1") && strings.Contains(seen, "cluster2"), nil
	}); err != nil {
		return fmt.Errorf("traffic did not reach both clusters: %s", seen)
	}
	done("30 connections to the same ClusterSetIP answered by: %s", seen)

	fmt.Printf("\nThe demo is up (ready in %v). Try, in another shell:\n\n", time.Since(began).Round(time.Second))
	fmt.Printf("  kubectl --kubeconfig %s -n %s get serviceimports,endpointslices\n", c1.KubeconfigPath, appNamespace)
	fmt.Printf("  ip netns exec %s dig @%s %s\n", client.NS.Name, daemons[0].DNS.Addr(), fqdn)
	fmt.Printf("  ip netns exec %s dig @%s -x %s\n", client.NS.Name, daemons[0].DNS.Addr(), vip)
	fmt.Printf("  ip netns exec %s bash -c 'head -1 </dev/tcp/%s/80'\n", client.NS.Name, vip)
	fmt.Printf("  ip netns exec %s nft list table ip mcsd\n", daemons[0].Node.NS.Name)
	fmt.Printf("  curl -s %s | grep ^mcsd_\n", daemons[0].Metrics)
	fmt.Printf("\nmcsd logs: %s and %s. Press Ctrl-C to stop and clean up.\n", daemons[0].LogPath(), daemons[1].LogPath())
	<-ctx.Done()
	return nil
}

// lookupA asks server from inside pod's network namespace for name's A records.
func lookupA(pod *harness.Pod, server netip.AddrPort, name string) ([]netip.Addr, error) {
	q := new(dns.Msg)
	q.SetQuestion(dns.Fqdn(name), dns.TypeA)
	var in *dns.Msg
	if err := pod.NS.Do(func() (err error) {
		in, _, err = (&dns.Client{Timeout: time.Second}).Exchange(q, server.String())
		return err
	}); err != nil {
		return nil, err
	}
	var out []netip.Addr
	for _, rr := range in.Answer {
		if a, ok := rr.(*dns.A); ok {
			if addr, ok := netip.AddrFromSlice(a.A.To4()); ok {
				out = append(out, addr)
			}
		}
	}
	return out, nil
}

// reach connects n times from pod to vip:80 and says which pods answered.
func reach(ctx context.Context, pod *harness.Pod, vip netip.Addr, n int) (string, error) {
	counts := map[string]int{}
	for range n {
		askCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
		id, err := pod.Ask(askCtx, "tcp", netip.AddrPortFrom(vip, 80).String())
		cancel()
		if err != nil {
			return "", fmt.Errorf("connecting to %s:80: %w", vip, err)
		}
		counts[fmt.Sprintf("%s in %s", id.Pod, id.Cluster)]++
	}
	keys := make([]string, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s ×%d", k, counts[k]))
	}
	return strings.Join(parts, ", "), nil
}
