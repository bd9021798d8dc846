package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mcsd-io/mcsd/test/lib/ports"

	"github.com/miekg/dns"
	"k8s.io/apimachinery/pkg/util/wait"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/mcsd-io/mcsd/manifests"
	"github.com/mcsd-io/mcsd/test/lib/conformance"
	"github.com/mcsd-io/mcsd/test/lib/fixture"
	"github.com/mcsd-io/mcsd/test/lib/harness"
	"github.com/mcsd-io/mcsd/test/lib/images"
	"github.com/mcsd-io/mcsd/test/lib/netns"
	"github.com/mcsd-io/mcsd/vipalloc"
)

// clusterDNS is a cluster's own DNS: the pinned CoreDNS with its kubernetes
// plugin for cluster.local, as kube-dns is deployed, reading the member's
// API server, and the server block of manifests/mcsd/coredns-snippet.yaml as
// an operator adds it, forwarding the clusterset zone and its reverse zones
// to mcsd. It listens on loopback beside the API server, so it is asked from
// the test process rather than from a pod; mcsd's DNS listens inside its
// node's network namespace, so the snippet's forward target is a relay into
// that namespace (dnsRelay).
type clusterDNS struct {
	prog *harness.Program
	addr string
}

// startClusterDNS runs CoreDNS for m, forwarding the clusterset zones to
// the DNS server of d, and waits until it answers from a synced cache.
func startClusterDNS(t *testing.T, cs *harness.ClusterSet, m *fixture.Member, node *harness.Node, d *fixture.Daemon) *clusterDNS {
	t.Helper()
	bin, err := coreDNSBinary()
	if err != nil {
		t.Fatalf("the cluster DNS: %v", err)
	}
	port, err := ports.Free()
	if err != nil {
		t.Fatal(err)
	}
	relay := startDNSRelay(t, node.NS, d.DNS.String())
	snippet, err := manifests.CoreDNSServerBlock(relay)
	if err != nil {
		t.Fatal(err)
	}
	// The cluster DNS binds loopback only; the snippet's block must share
	// its listener.
	snippet = strings.Replace(snippet, "{\n", "{\n    bind 127.0.0.1\n", 1)
	dir := filepath.Join(cs.Dir, "clusterdns-"+m.ID)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	corefile := fmt.Sprintf(`.:%d {
    bind 127.0.0.1
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        kubeconfig %s
    }
}
%s`, port, m.KubeconfigPath, snippet)
	path := filepath.Join(dir, "Corefile")
	if err := os.WriteFile(path, []byte(corefile), 0o644); err != nil {
		t.Fatal(err)
	}
	prog, err := cs.StartProgram("clusterdns-"+m.ID+"-"+strconv.Itoa(port), bin, "-conf", path, "-dns.port", strconv.Itoa(port))
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
	return c.queryOver("udp", name, qtype)
}

// queryOver asks over network, "udp" or "tcp".
func (c *clusterDNS) queryOver(network, name string, qtype uint16) (*dns.Msg, error) {
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), qtype)
	resp, _, err := (&dns.Client{Net: network, Timeout: 2 * time.Second}).Exchange(m, c.addr)
	return resp, err
}

// startDNSRelay relays DNS over UDP and TCP from a loopback port of the
// test process to target inside ns, until the test ends, and returns the
// loopback address.
func startDNSRelay(t *testing.T, ns *netns.NS, target string) string {
	t.Helper()
	var pc net.PacketConn
	var ln net.Listener
	for attempt := 0; ; attempt++ {
		port, err := ports.Free()
		if err != nil {
			t.Fatal(err)
		}
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		if pc, err = net.ListenPacket("udp", addr); err == nil {
			if ln, err = net.Listen("tcp", addr); err == nil {
				break
			}
			pc.Close()
		}
		if attempt == 10 {
			t.Fatalf("no free port for a DNS relay: %v", err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() { cancel(); pc.Close(); ln.Close() })
	go func() {
		buf := make([]byte, dns.MaxMsgSize)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			q := slices.Clone(buf[:n])
			go func() {
				c, err := ns.Dial(ctx, "udp", target)
				if err != nil {
					return
				}
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(5 * time.Second))
				if _, err := c.Write(q); err != nil {
					return
				}
				resp := make([]byte, dns.MaxMsgSize)
				n, err := c.Read(resp)
				if err == nil {
					_, _ = pc.WriteTo(resp[:n], from)
				}
			}()
		}
	}()
	go func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer in.Close()
				out, err := ns.Dial(ctx, "tcp", target)
				if err != nil {
					return
				}
				defer out.Close()
				go func() { _, _ = io.Copy(out, in) }()
				_, _ = io.Copy(in, out)
			}()
		}
	}()
	return pc.LocalAddr().String()
}

// coreDNSBinary builds (once, cached by version) and returns the pinned
// CoreDNS.
func coreDNSBinary() (string, error) { return images.CoreDNSBinary(context.Background()) }

// TestClusterDNS asks the cluster's own DNS, configured with the shipped
// CoreDNS snippet, what only the snippet's reverse zones lead to mcsd: the
// PTR record of a ClusterSetIP, and NXDOMAIN with the reverse zone's SOA
// for an address of the clusterset range nobody holds.
func TestClusterDNS(t *testing.T) {
	s := startClusterSet(t)
	e := s.begin(t)
	e.DeployHello(nil)
	si := e.AwaitImport(0, func(si *mcsv1beta1.ServiceImport) error {
		if len(si.Spec.IPs) == 0 {
			return fmt.Errorf("no spec.ips")
		}
		return nil
	})
	e.AwaitAnswer(0, e.FQDN(), dns.TypeA, conformance.Exactly(si.Spec.IPs[:1]))

	vip := netip.MustParseAddr(si.Spec.IPs[0])
	if !vip.Is4() || !vipalloc.DefaultClusterSetCIDRv4.Contains(vip) {
		t.Fatalf("ClusterSetIP %s is not in the default IPv4 clusterset range %s the snippet forwards", vip, vipalloc.DefaultClusterSetCIDRv4)
	}
	ptr, _ := dns.ReverseAddr(vip.String())
	e.AwaitAnswer(0, ptr, dns.TypePTR, func(m *dns.Msg) error {
		if m.Rcode != dns.RcodeSuccess || len(m.Answer) != 1 {
			return fmt.Errorf("rcode %s with %d records, want one PTR record", dns.RcodeToString[m.Rcode], len(m.Answer))
		}
		if p, ok := m.Answer[0].(*dns.PTR); !ok || p.Ptr != e.FQDN() {
			return fmt.Errorf("answer %v, want PTR %s", m.Answer[0], e.FQDN())
		}
		return nil
	})

	// Clusters take VIP blocks from the start of the range: its last
	// address is nobody's here.
	unused, _ := dns.ReverseAddr("243.255.255.255")
	for _, network := range []string{"udp", "tcp"} {
		m, err := e.Requesters(0)[0].Query(e.Ctx(), conformance.ClusterDNS, network, unused, dns.TypePTR)
		if err != nil {
			t.Fatalf("asking the cluster DNS for %s over %s: %v", unused, network, err)
		}
		if m.Rcode != dns.RcodeNameError || len(m.Ns) != 1 || m.Ns[0].Header().Name != "243.in-addr.arpa." {
			t.Errorf("the cluster DNS answered %s over %s with %s, authority %v; want NXDOMAIN with the SOA of 243.in-addr.arpa.", unused, network, dns.RcodeToString[m.Rcode], m.Ns)
		}
	}
}
