package echopod

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"

	"github.com/mcsd-io/mcsd/test/lib/conformance"
	"github.com/mcsd-io/mcsd/test/lib/echo"
	"github.com/mcsd-io/mcsd/test/lib/netns"
)

// Client is a running pod that tests ask DNS and connect from: inside its
// network namespace, to the nameserver the kubelet wrote into its
// resolv.conf (the cluster DNS Service), as its own containers would.
type Client struct {
	Pod *corev1.Pod
	NS  *netns.NS
	// Nameserver is the first nameserver of the pod's resolv.conf, as
	// HOST:53.
	Nameserver string
}

// ClientOf is the pod whose network namespace is ns and one of whose
// processes is pid, as this machine sees it.
func ClientOf(pod *corev1.Pod, pid int, ns *netns.NS) (*Client, error) {
	resolv, err := os.ReadFile(fmt.Sprintf("/proc/%d/root/etc/resolv.conf", pid))
	if err != nil {
		return nil, fmt.Errorf("reading the resolv.conf of %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	c := &Client{Pod: pod, NS: ns}
	sc := bufio.NewScanner(strings.NewReader(string(resolv)))
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 2 && f[0] == "nameserver" && c.Nameserver == "" {
			c.Nameserver = net.JoinHostPort(f[1], "53")
		}
	}
	if c.Nameserver == "" {
		return nil, fmt.Errorf("the resolv.conf of %s/%s names no nameserver:\n%s", pod.Namespace, pod.Name, resolv)
	}
	return c, nil
}

func (c *Client) String() string { return c.Pod.Spec.NodeName + "/" + c.Pod.Name }

// Query asks the pod's nameserver, over network ("udp" or "tcp").
func (c *Client) Query(network, name string, qtype uint16) (*dns.Msg, error) {
	return c.QueryServer(network, name, qtype, c.Nameserver)
}

// QueryServer asks server (HOST:PORT) from inside the pod.
func (c *Client) QueryServer(network, name string, qtype uint16, server string) (*dns.Msg, error) {
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), qtype)
	var resp *dns.Msg
	err := c.NS.Do(func() error {
		var err error
		resp, _, err = (&dns.Client{Net: network, Timeout: 2 * time.Second}).Exchange(m, server)
		return err
	})
	return resp, err
}

// Dial connects from inside the pod.
func (c *Client) Dial(ctx context.Context, network, address string) (net.Conn, error) {
	return c.NS.Dial(ctx, network, address)
}

// Ask connects from the pod to address and returns who answered.
func (c *Client) Ask(ctx context.Context, network, address string) (echo.Identity, error) {
	conn, err := c.Dial(ctx, network, address)
	if err != nil {
		return echo.Identity{}, err
	}
	defer conn.Close()
	if strings.HasPrefix(network, "udp") {
		return echo.AskUDP(ctx, conn)
	}
	return echo.AskTCP(ctx, conn)
}

// Requester is a client the conformance suite asks from: the cluster DNS is
// the pod's nameserver, and mcsd the node agent's DNS server at MCSD
// (HOST:PORT, its node's address).
type Requester struct {
	*Client
	MCSD string
}

// Query implements conformance.Requester.
func (r Requester) Query(_ context.Context, server conformance.Server, network, name string, qtype uint16) (*dns.Msg, error) {
	if server == conformance.ClusterDNS {
		return r.Client.Query(network, name, qtype)
	}
	return r.QueryServer(network, name, qtype, r.MCSD)
}
