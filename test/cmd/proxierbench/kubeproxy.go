package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/mcsd-io/mcsd/test/lib/harness"
)

// kube-proxy's addresses inside its node's namespace.
const (
	kubeProxyMetrics = "127.0.0.1:10249"
	kubeProxyHealthz = "127.0.0.1:10256"
	// creators is how many clients create objects at once.
	creators = 32
	// managedBy marks the bench's EndpointSlices as nobody's controller's.
	managedBy = "proxierbench.mcsd.io"
	// syncTimeout bounds the wait for one kube-proxy sync.
	syncTimeout = 20 * time.Minute
)

// kubeProxyBench is kube-proxy (in nftables or iptables mode) on a harness
// node against a real API server, whose Services grow with the sizes
// measured.
type kubeProxyBench struct {
	bin     string
	cs      *harness.ClusterSet
	c       *harness.Cluster
	node    *harness.Node
	kube    kubernetes.Interface
	created int
	runs    int
}

func newKubeProxyBench(ctx context.Context, bin string) (_ *kubeProxyBench, err error) {
	fmt.Println("kube-proxy: starting a harness API server")
	b := &kubeProxyBench{bin: bin}
	if b.cs, err = harness.Up(ctx, harness.Options{Clusters: 1}); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			b.close()
		}
	}()
	b.c = b.cs.Members[0]
	if b.node, err = b.c.AddNode(ctx); err != nil {
		return nil, err
	}
	cfg := *b.c.Config
	// Creating tens of thousands of objects: the API server, not the
	// client's rate limiter, should set the pace.
	cfg.QPS, cfg.Burst = 5000, 10000
	if b.kube, err = kubernetes.NewForConfig(&cfg); err != nil {
		return nil, err
	}
	_, err = b.kube.CoreV1().Namespaces().Create(ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: benchNS}}, metav1.CreateOptions{})
	return b, err
}

// grow brings the API server to n Services with their EndpointSlices.
func (b *kubeProxyBench) grow(ctx context.Context, n int) error {
	if n <= b.created {
		return nil
	}
	start := time.Now()
	if err := createServices(ctx, b.kube, b.created, n); err != nil {
		return fmt.Errorf("creating %d Services: %w", n, err)
	}
	fmt.Printf("kube-proxy: %d Services and EndpointSlices in the API server (%d created in %v)\n",
		n, n-b.created, time.Since(start).Round(time.Second))
	b.created = n
	return nil
}

// measure runs kube-proxy once on the n Services, in mode ("nftables" or
// "iptables").
func (b *kubeProxyBench) measure(ctx context.Context, mode string, n int) (syncTimes, error) {
	b.runs++
	res, err := runKubeProxy(ctx, b.bin, mode, b.cs, b.c, b.node, b.kube, n, b.runs)
	if err != nil {
		return res, fmt.Errorf("%d Services: %w", n, err)
	}
	return res, nil
}

func (b *kubeProxyBench) close() { b.cs.Close() }

func kpService(i int) *v1.Service {
	s := &v1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: benchNS, Name: fmt.Sprintf("svc-%d", i)}}
	for _, p := range benchPorts {
		s.Spec.Ports = append(s.Spec.Ports, v1.ServicePort{Name: p.name, Protocol: v1.ProtocolTCP, Port: p.port,
			TargetPort: intstr.FromInt32(p.target)})
	}
	return s
}

// kpSlice is service i's EndpointSlice: the same ten endpoints the proxier's
// imports have, in one slice as a single cluster has them. moved replaces
// the first endpoint with another address (nil: none).
func kpSlice(i int, moved *netip.Addr) *discoveryv1.EndpointSlice {
	name := fmt.Sprintf("svc-%d", i)
	local, remote := benchEndpoints(i)
	addrs := append(local, remote...)
	if moved != nil {
		addrs[0] = *moved
	}
	s := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: benchNS, Name: name, Labels: map[string]string{
			discoveryv1.LabelServiceName: name,
			discoveryv1.LabelManagedBy:   managedBy,
		}},
		AddressType: discoveryv1.AddressTypeIPv4,
	}
	for _, p := range benchPorts {
		s.Ports = append(s.Ports, discoveryv1.EndpointPort{Name: ptr.To(p.name), Protocol: ptr.To(v1.ProtocolTCP), Port: ptr.To(p.target)})
	}
	for _, a := range addrs {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{a.String()},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}})
	}
	return s
}

// createServices creates Services from..to-1 with their EndpointSlices, with
// many clients at once.
func createServices(ctx context.Context, kube kubernetes.Interface, from, to int) error {
	var next atomic.Int64
	next.Store(int64(from))
	errs := make(chan error, creators)
	var wg sync.WaitGroup
	for w := 0; w < creators; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= to {
					return
				}
				_, err := kube.CoreV1().Services(benchNS).Create(ctx, kpService(i), metav1.CreateOptions{})
				if err == nil || apierrors.IsAlreadyExists(err) {
					_, err = kube.DiscoveryV1().EndpointSlices(benchNS).Create(ctx, kpSlice(i, nil), metav1.CreateOptions{})
				}
				if err != nil && !apierrors.IsAlreadyExists(err) {
					errs <- fmt.Errorf("service %d: %w", i, err)
					next.Store(int64(to))
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// runKubeProxy starts kube-proxy on the node, waits for its first full
// sync, changes one Service's endpoints a few times, and stops it.
func runKubeProxy(ctx context.Context, bin, mode string, cs *harness.ClusterSet, c *harness.Cluster, node *harness.Node,
	kube kubernetes.Interface, n, run int) (syncTimes, error) {
	res := syncTimes{load: loadAverage()}
	// Start from an empty node, as the proxier does: kube-proxy --cleanup
	// deletes the rules of each of its modes.
	if _, err := node.NS.Exec(bin, "--cleanup"); err != nil {
		return res, fmt.Errorf("kube-proxy --cleanup: %w", err)
	}
	// The kubeconfig names the API server on 127.0.0.1: inside the node
	// that is the node's own loopback.
	stopForward, err := node.ForwardAPIServer()
	if err != nil {
		return res, err
	}
	defer stopForward()

	logPath := filepath.Join(cs.Dir, fmt.Sprintf("kube-proxy-%d-%d.log", n, run))
	logFile, err := os.Create(logPath)
	if err != nil {
		return res, err
	}
	defer logFile.Close()
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	cmd := node.NS.Command(runCtx, bin, node.KubeProxyArgs(mode, kubeProxyMetrics, kubeProxyHealthz)...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 10 * time.Second
	if err := cmd.Start(); err != nil {
		return res, err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		cancel()
		<-exited
	}()

	scrape := metricsScraper(node)
	wait := func(metric string, count float64) (float64, error) {
		deadline := time.Now().Add(syncTimeout)
		for {
			m, err := scrape(ctx)
			if err == nil && m[metric+"_count"] >= count {
				return m[metric+"_sum"], nil
			}
			select {
			case err := <-exited:
				exited <- err
				return 0, fmt.Errorf("kube-proxy exited (%v); its log is %s", err, logPath)
			case <-ctx.Done():
				return 0, ctx.Err()
			case <-time.After(100 * time.Millisecond):
			}
			if time.Now().After(deadline) {
				return 0, fmt.Errorf("no %s after %v; kube-proxy's log is %s", metric, syncTimeout, logPath)
			}
		}
	}
	const full = "kubeproxy_sync_full_proxy_rules_duration_seconds"
	const partial = "kubeproxy_sync_partial_proxy_rules_duration_seconds"
	sum, err := wait(full, 1)
	if err != nil {
		return res, err
	}
	res.full = seconds(sum)

	var partials []time.Duration
	changed := n / 2
	for k := 0; k < partialSyncs; k++ {
		m, err := scrape(ctx)
		if err != nil {
			return res, err
		}
		before, count := m[partial+"_sum"], m[partial+"_count"]
		moved := nth(movedBase, (changed*partialSyncs+k)*8+run)
		slice := kpSlice(changed, &moved)
		current, err := kube.DiscoveryV1().EndpointSlices(benchNS).Get(ctx, slice.Name, metav1.GetOptions{})
		if err != nil {
			return res, err
		}
		current.Endpoints = slice.Endpoints
		if _, err := kube.DiscoveryV1().EndpointSlices(benchNS).Update(ctx, current, metav1.UpdateOptions{}); err != nil {
			return res, err
		}
		after, err := wait(partial, count+1)
		if err != nil {
			return res, err
		}
		partials = append(partials, seconds(after-before))
		// kube-proxy's minimum sync period is one second: let the next
		// change be a sync of its own.
		time.Sleep(1100 * time.Millisecond)
	}
	res.partial = median(partials)
	return res, nil
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// metricsScraper returns a function that reads kube-proxy's IPv4 metrics,
// as "name" -> value for the unlabelled or ip_family="IPv4" samples.
func metricsScraper(node *harness.Node) func(context.Context) (map[string]float64, error) {
	client := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, address string) (net.Conn, error) {
			return node.NS.Dial(ctx, network, address)
		},
		DisableKeepAlives: true,
	}, Timeout: 10 * time.Second}
	return func(ctx context.Context) (map[string]float64, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+kubeProxyMetrics+"/metrics", nil)
		if err != nil {
			return nil, err
		}
		resp, err := client.Do(req)
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return nil, errors.New(resp.Status)
		}
		m := map[string]float64{}
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 64*1024), 1024*1024)
		for sc.Scan() {
			line := sc.Text()
			if strings.HasPrefix(line, "#") {
				continue
			}
			i := strings.LastIndexByte(line, ' ')
			if i < 0 {
				continue
			}
			name, labels := line[:i], ""
			if j := strings.IndexByte(name, '{'); j >= 0 {
				name, labels = name[:j], name[j:]
			}
			if labels != "" && labels != `{ip_family="IPv4"}` {
				continue
			}
			if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
				m[name] = v
			}
		}
		return m, sc.Err()
	}
}
