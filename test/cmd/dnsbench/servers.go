package main

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	mcsclient "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned"
	mcsinformers "sigs.k8s.io/mcs-api/pkg/client/informers/externalversions"

	mcsdns "github.com/mcsd-io/mcsd/dns"
	"github.com/mcsd-io/mcsd/mcsslice"
	"github.com/mcsd-io/mcsd/vipalloc"
)

// The two servers, each a process of its own pinned to one core.

// server is a running DNS server under test.
type server struct {
	name string
	addr string
	cmd  *exec.Cmd
}

// pinned returns a command that runs argv on cpu, through taskset. The Go
// runtime of the command sees one CPU and sets GOMAXPROCS to 1.
func pinned(cpu int, argv ...string) *exec.Cmd {
	return exec.Command("taskset", append([]string{"-c", strconv.Itoa(cpu)}, argv...)...)
}

// freeAddr returns a loopback address whose port is free on TCP and UDP now.
func freeAddr() (string, error) {
	for range 20 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return "", err
		}
		addr := ln.Addr().String()
		pc, err := net.ListenPacket("udp", addr)
		ln.Close()
		if err == nil {
			pc.Close()
			return addr, nil
		}
	}
	return "", fmt.Errorf("no port free on both TCP and UDP")
}

func start(name string, cmd *exec.Cmd, addr, logPath string) (*server, error) {
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	go func() { _ = cmd.Wait(); logf.Close() }()
	return &server{name: name, addr: addr, cmd: cmd}, nil
}

// stop ends the server's process.
func (s *server) stop() {
	if s.cmd.Process != nil {
		_ = s.cmd.Process.Kill()
	}
}

// startCoreDNS runs CoreDNS's kubernetes plugin with the multicluster option,
// as its README configures it, plus the reverse zones so that it may answer
// PTR queries if it can, and its prometheus plugin: mcsd's server counts
// its queries too.
func startCoreDNS(bin, dir, kubeconfig string, cpu int) (*server, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	metricsAddr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	host, port, _ := net.SplitHostPort(addr)
	corefile := fmt.Sprintf(`.:%s {
    bind %s
    prometheus %s
    kubernetes cluster.local %s in-addr.arpa ip6.arpa {
        kubeconfig %s
        multicluster %s
    }
}
`, port, host, metricsAddr, strings.TrimSuffix(zone, "."), kubeconfig, strings.TrimSuffix(zone, "."))
	path := filepath.Join(dir, "Corefile")
	if err := os.WriteFile(path, []byte(corefile), 0o644); err != nil {
		return nil, err
	}
	return start("coredns", pinned(cpu, bin, "-conf", path), addr, filepath.Join(dir, "coredns.log"))
}

// startMCSD runs this program's -serve-mcsd mode.
func startMCSD(dir, kubeconfig string, cpu int) (*server, error) {
	return startSelf("mcsd", dir, cpu, "-serve-mcsd", "-kubeconfig", kubeconfig)
}

// startSelf runs this program on cpu with args and a free -listen
// address, logging to <dir>/<name>.log.
func startSelf(name, dir string, cpu int, args ...string) (*server, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	argv := append(append([]string{self}, args...), "-listen", addr)
	return start(name, pinned(cpu, argv...), addr, filepath.Join(dir, name+".log"))
}

// serveMCSD is the -serve-mcsd mode: mcsd's DNS server fed by informers on
// the cluster of kubeconfig, as the daemon runs it.
func serveMCSD(ctx context.Context, kubeconfig, listen string) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	mcs, err := mcsclient.NewForConfig(cfg)
	if err != nil {
		return err
	}
	logger := klog.Background()
	idx := mcsdns.NewIndex(logger)
	// As the daemon configures it with the default --clusterset-cidrs.
	srv, err := mcsdns.New(mcsdns.Config{Index: idx, Listen: listen, Registerer: prometheus.NewRegistry(), Logger: logger,
		ReverseCIDRs: []netip.Prefix{vipalloc.DefaultClusterSetCIDRv4, vipalloc.DefaultClusterSetCIDRv6}})
	if err != nil {
		return err
	}
	kubeFactory := informers.NewSharedInformerFactoryWithOptions(kube, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = mcsslice.Selector }))
	mcsFactory := mcsinformers.NewSharedInformerFactory(mcs, 0)
	imports, slices := mcsFactory.Multicluster().V1beta1().ServiceImports().Informer(), kubeFactory.Discovery().V1().EndpointSlices().Informer()
	errc := make(chan error, 2)
	go func() { errc <- idx.Run(ctx, imports, slices) }()
	mcsFactory.Start(ctx.Done())
	kubeFactory.Start(ctx.Done())
	go func() { errc <- srv.Run(ctx) }()
	return <-errc
}

// cpuTime is the user and system CPU time the process has used.
func cpuTime(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// Fields after the command name, which is in parentheses and may hold
	// spaces: state is field 3, utime 14 and stime 15.
	s := string(b)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	if len(fields) < 13 {
		return 0, fmt.Errorf("short /proc/%d/stat", pid)
	}
	utime, err1 := strconv.ParseInt(fields[11], 10, 64)
	stime, err2 := strconv.ParseInt(fields[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("parsing /proc/%d/stat", pid)
	}
	// The kernel counts in USER_HZ, 100 on Linux.
	return time.Duration(utime+stime) * 10 * time.Millisecond, nil
}

// serverPID is the pid of the server itself: taskset execs it in place.
func (s *server) pid() int { return s.cmd.Process.Pid }

// ask sends one query and returns the answer, over UDP with a 4096-byte
// EDNS0 buffer, and again over TCP when it was truncated.
func ask(addr, name string, qtype uint16) (*dns.Msg, error) {
	m := new(dns.Msg)
	m.SetQuestion(name, qtype)
	m.SetEdns0(4096, false)
	c := &dns.Client{Net: "udp", Timeout: lostAfter, UDPSize: 4096}
	r, _, err := c.Exchange(m, addr)
	if err == nil && r.Truncated {
		c.Net = "tcp"
		r, _, err = c.Exchange(m, addr)
	}
	return r, err
}
