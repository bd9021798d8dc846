package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/server/healthz"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/mcsd-io/mcsd/charts"
	"github.com/mcsd-io/mcsd/dns"
)

// servedAgent is a node agent's DNS server and health endpoints on one
// loopback address, as the daemon serves them.
type servedAgent struct {
	index *dns.Index
	// sync makes the index synced: the server answers from then on.
	sync func()
}

// serveAgent serves DNS and health on ip at the given ports until the test
// ends; the DNS index syncs when sync is called.
func serveAgent(t *testing.T, ip string, dnsPort, healthPort int) *servedAgent {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	a := &servedAgent{index: dns.NewIndex(klog.Background())}
	srv, err := dns.New(dns.Config{Index: a.index, Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	addr := net.JoinHostPort(ip, strconv.Itoa(dnsPort))
	pc, err := net.ListenPacket("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ctx, pc, ln) }()
	dp := &nodeAgent{dnsServer: srv, dnsCheck: newDNSAnswers("", dns.DefaultZone)}
	dp.dnsCheck.serving(pc.LocalAddr())
	if healthPort != 0 {
		serveHTTP(t, net.JoinHostPort(ip, strconv.Itoa(healthPort)), healthMux(dp.healthChecks(), dp.readyChecks()))
	}
	a.sync = func() {
		imports := emptyInformer(ctx, &mcsv1beta1.ServiceImport{}, &mcsv1beta1.ServiceImportList{})
		slices := emptyInformer(ctx, &discoveryv1.EndpointSlice{}, &discoveryv1.EndpointSliceList{})
		go func() { _ = a.index.Run(ctx, imports, slices) }()
	}
	return a
}

// emptyLW lists an empty collection and watches nothing happen, with a
// plain list and watch (no watch-list stream, whose bookmark it could not
// send).
type emptyLW struct{ cache.ListWatch }

func (emptyLW) IsWatchListSemanticsUnSupported() bool { return true }

// emptyInformer is a running informer of an empty collection of obj.
func emptyInformer(ctx context.Context, obj, list runtime.Object) cache.SharedIndexInformer {
	lw := &emptyLW{cache.ListWatch{
		ListWithContextFunc:  func(context.Context, metav1.ListOptions) (runtime.Object, error) { return list, nil },
		WatchFuncWithContext: func(context.Context, metav1.ListOptions) (watch.Interface, error) { return watch.NewFake(), nil },
	}}
	inf := cache.NewSharedIndexInformer(lw, obj, 0, cache.Indexers{})
	go inf.Run(ctx.Done())
	return inf
}

func serveHTTP(t *testing.T, addr string, h http.Handler) {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
}

// commonPort is a port free for UDP and TCP on every one of ips.
func commonPort(t *testing.T, ips ...string) int {
	t.Helper()
	for range 100 {
		first, err := net.ListenPacket("udp", net.JoinHostPort(ips[0], "0"))
		if err != nil {
			t.Fatal(err)
		}
		port := first.LocalAddr().(*net.UDPAddr).Port
		first.Close()
		free := true
		for _, ip := range ips {
			addr := net.JoinHostPort(ip, strconv.Itoa(port))
			pc, err := net.ListenPacket("udp", addr)
			if err != nil {
				free = false
				break
			}
			pc.Close()
			ln, err := net.Listen("tcp", addr)
			if err != nil {
				free = false
				break
			}
			ln.Close()
		}
		if free {
			return port
		}
	}
	t.Fatalf("no port free on all of %v", ips)
	return 0
}

// installObjects are mcsd's workloads as the chart makes them, their pods
// at the given addresses (an empty one has none yet), and the DNS Service
// on serviceIP.
func installObjects(ns string, desired int32, agentIPs []string, controllerIP, serviceIP string, dnsPort, healthPort, servicePort int) []runtime.Object {
	labels := func(component string) map[string]string {
		return map[string]string{"app.kubernetes.io/name": "mcsd", "app.kubernetes.io/component": component}
	}
	container := func(ports ...corev1.ContainerPort) corev1.PodSpec {
		return corev1.PodSpec{Containers: []corev1.Container{{Name: "mcsd", Args: []string{"--components=dns,proxier"}, Ports: ports}}}
	}
	health := corev1.ContainerPort{Name: "health", ContainerPort: int32(healthPort)}
	objs := []runtime.Object{
		&appsv1.DaemonSet{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "mcsd-node-agent"},
			Spec: appsv1.DaemonSetSpec{
				Selector: &metav1.LabelSelector{MatchLabels: labels("node-agent")},
				Template: corev1.PodTemplateSpec{Spec: container(
					corev1.ContainerPort{Name: "dns", ContainerPort: int32(dnsPort), Protocol: corev1.ProtocolUDP},
					corev1.ContainerPort{Name: "dns-tcp", ContainerPort: int32(dnsPort), Protocol: corev1.ProtocolTCP}, health)},
			},
			Status: appsv1.DaemonSetStatus{DesiredNumberScheduled: desired},
		},
		&appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "mcsd-controller"},
			Spec: appsv1.DeploymentSpec{
				Replicas: ptr.To[int32](1),
				Selector: &metav1.LabelSelector{MatchLabels: labels("controller")},
				Template: corev1.PodTemplateSpec{Spec: container(health)},
			},
		},
		&corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "mcsd-dns"},
			Spec: corev1.ServiceSpec{ClusterIP: serviceIP, ClusterIPs: []string{serviceIP}, Ports: []corev1.ServicePort{
				{Name: "dns", Port: int32(servicePort), Protocol: corev1.ProtocolUDP},
				{Name: "dns-tcp", Port: int32(servicePort), Protocol: corev1.ProtocolTCP}}},
		},
		&corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "mcsd-controller-0", Labels: labels("controller")},
			Spec:       corev1.PodSpec{NodeName: "node-0"},
			Status:     corev1.PodStatus{Phase: corev1.PodRunning, PodIP: controllerIP},
		},
		// Another component's pod, which is none of the node agents.
		&corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "other", Labels: map[string]string{"app.kubernetes.io/name": "mcsd", "app.kubernetes.io/component": "test"}},
			Status:     corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "127.0.0.99"},
		},
	}
	for i, ip := range agentIPs {
		phase := corev1.PodRunning
		if ip == "" {
			phase = corev1.PodPending
		}
		objs = append(objs, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("mcsd-node-agent-%d", i), Labels: labels("node-agent")},
			Spec:       corev1.PodSpec{NodeName: fmt.Sprintf("node-%d", i)},
			Status:     corev1.PodStatus{Phase: phase, PodIP: ip},
		})
	}
	return objs
}

// The helm test's probe passes when every node agent, the DNS Service and
// the controller answer, and otherwise names what does not and why.
func TestProbeInstall(t *testing.T) {
	const ns = "mcsd-system"
	agents := []string{"127.0.0.2", "127.0.0.3"}
	controllerIP, serviceIP := "127.0.0.4", "127.0.0.5"
	dnsPort := commonPort(t, append(agents, serviceIP)...)
	healthPort := commonPort(t, append(agents, controllerIP)...)
	served := []*servedAgent{serveAgent(t, agents[0], dnsPort, healthPort), serveAgent(t, agents[1], dnsPort, healthPort)}
	// What kube-proxy does for the Service: an address answered by a
	// node agent.
	behindService := serveAgent(t, serviceIP, dnsPort, 0)
	var unready atomic.Bool
	serveHTTP(t, net.JoinHostPort(controllerIP, strconv.Itoa(healthPort)), healthMux(nil, []healthz.HealthChecker{healthz.NamedCheck("exporter-synced", func(*http.Request) error {
		if unready.Load() {
			return fmt.Errorf("exporter: caches not synced yet")
		}
		return nil
	})}))

	newProbe := func(objs []runtime.Object) *installProbe {
		return &installProbe{
			kube: kubefake.NewClientset(objs...), namespace: ns,
			nodeAgents: "mcsd-node-agent", controller: "mcsd-controller", dnsService: "mcsd-dns",
			http: &http.Client{Timeout: 2 * time.Second}, try: time.Second,
		}
	}
	// once checks everything once, as a probe that runs out of time does.
	once := func(objs []runtime.Object) (bool, string) {
		findings := newProbe(objs).round(t.Context())
		var out strings.Builder
		for _, f := range findings {
			fmt.Fprintln(&out, f)
		}
		return passed(findings), out.String()
	}
	objs := installObjects(ns, 2, agents, controllerIP, serviceIP, dnsPort, healthPort, dnsPort)
	expectFail := func(t *testing.T, objs []runtime.Object, says ...string) {
		t.Helper()
		ok, out := once(objs)
		if ok {
			t.Fatalf("the probe passed:\n%s", out)
		}
		for _, s := range says {
			if !strings.Contains(out, s) {
				t.Errorf("the probe does not say %q:\n%s", s, out)
			}
		}
	}

	t.Run("node agents whose DNS index has not synced fail, naming the check", func(t *testing.T) {
		expectFail(t, objs, "FAIL node agent mcsd-node-agent-0 on node-0 (127.0.0.2): GET /readyz: 500: dns-synced: dns: not serving from a synced index yet")
	})
	for _, a := range append(served, behindService) {
		a.sync()
	}
	t.Run("everything answering passes, each thing named", func(t *testing.T) {
		var b strings.Builder
		// Retried until the indexes have synced.
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		ok := newProbe(objs).run(ctx, &b, 10*time.Millisecond)
		out := b.String()
		if !ok {
			t.Fatalf("the probe failed:\n%s", out)
		}
		for _, want := range []string{
			"ok   node agent mcsd-node-agent-0 on node-0 (127.0.0.2): /readyz, /livez, the SOA of clusterset.local. over UDP and TCP",
			"ok   node agent mcsd-node-agent-1 on node-1 (127.0.0.3)",
			"ok   Service mcsd-dns at " + net.JoinHostPort(serviceIP, strconv.Itoa(dnsPort)),
			"ok   controller mcsd-controller-0 on node-0 (127.0.0.4): /readyz",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("the probe does not say %q:\n%s", want, out)
			}
		}
		if strings.Contains(out, "127.0.0.99") {
			t.Errorf("the probe checked a pod that is no node agent:\n%s", out)
		}
	})
	t.Run("a node agent the DaemonSet schedules but that has not started fails", func(t *testing.T) {
		expectFail(t, installObjects(ns, 3, append(agents, ""), controllerIP, serviceIP, dnsPort, healthPort, dnsPort),
			"FAIL node agent mcsd-node-agent-2 on node-2 (): no address yet")
		expectFail(t, installObjects(ns, 3, agents, controllerIP, serviceIP, dnsPort, healthPort, dnsPort),
			"FAIL DaemonSet mcsd-node-agent: 2 node agent pods, 3 scheduled")
	})
	t.Run("a Service that does not answer fails, naming its address", func(t *testing.T) {
		other := commonPort(t, serviceIP)
		expectFail(t, installObjects(ns, 2, agents, controllerIP, serviceIP, dnsPort, healthPort, other),
			fmt.Sprintf("FAIL Service mcsd-dns at %s: DNS over UDP at %[1]s:", net.JoinHostPort(serviceIP, strconv.Itoa(other))))
	})
	t.Run("a controller that is not ready fails, naming the check", func(t *testing.T) {
		unready.Store(true)
		defer unready.Store(false)
		expectFail(t, objs, "FAIL controller mcsd-controller-0 on node-0 (127.0.0.4): GET /readyz: 500: exporter-synced: exporter: caches not synced yet")
	})
	t.Run("a missing workload fails, naming it", func(t *testing.T) {
		expectFail(t, objs[1:], "FAIL DaemonSet mcsd-system/mcsd-node-agent:")
	})
}

// The chart's helm test runs this probe with flags it knows: every
// argument of the test pod parses, and only the cluster (here a kubeconfig
// that does not exist) is missing.
func TestChartTestRunsTheProbe(t *testing.T) {
	hooks, err := charts.TestHooks("mcs", nil)
	if err != nil {
		t.Fatal(err)
	}
	var pod corev1.Pod
	for _, h := range hooks {
		if h.GetKind() == "Pod" {
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(h.Object, &pod); err != nil {
				t.Fatal(err)
			}
		}
	}
	if len(pod.Spec.Containers) != 1 {
		t.Fatalf("the chart's test has no pod with one container: %v", hooks)
	}
	args := pod.Spec.Containers[0].Args
	if len(args) < 2 || args[0] != "probe" || args[1] != "install" {
		t.Fatalf("the chart's test runs %q, not mcsd probe install", args)
	}
	missing := filepath.Join(t.TempDir(), "kubeconfig")
	var stdout, stderr strings.Builder
	code := runProbe(append(args[1:], "--kubeconfig="+missing), &stdout, &stderr)
	// A flag it did not know would stop it before it reads --kubeconfig.
	if code != 2 || !strings.HasPrefix(stderr.String(), "mcsd probe install: --kubeconfig: ") {
		t.Fatalf("mcsd %q: exit %d\n%s%s", args, code, stdout.String(), stderr.String())
	}
	t.Log(stderr.String())
}
