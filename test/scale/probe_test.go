package scale

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"time"

	"github.com/miekg/dns"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/mcsd-io/mcsd/nsenter"
	"github.com/mcsd-io/mcsd/test/harness"
	"github.com/mcsd-io/mcsd/test/netns"
)

// dropProbe watches one node's data plane for the endpoints of the cluster
// that dies (the second one): in DNS, the A records of a headless service;
// in nftables, the endpoint count of sample ClusterSetIP ports (their
// service-ips verdict "goto lb-tcp-<N>"), read one element at a time so
// that a probe costs the same at 10 or 500,000 endpoints.
type dropProbe struct {
	node     *harness.Node
	sc       scenario
	headless string
	vips     []string
}

func newDropProbe(node *harness.Node, sc scenario, _ []string) *dropProbe {
	p := &dropProbe{node: node, sc: sc, headless: "svc-00000." + namespaceOf(0) + ".svc.clusterset.local."}
	for _, i := range []int{1, sc.services / 2, sc.services - 1} {
		if i%headlessEvery == 0 {
			i++
		}
		p.vips = append(p.vips, vipOf(i).String())
	}
	return p
}

// counts returns the headless service's A records and the smallest
// endpoint count of the sample ports, and when DNS answered.
func (p *dropProbe) counts(ctx context.Context) (records, endpoints int, answered time.Time, err error) {
	err = nsenter.Do(netns.Path(p.node.NS.Name), func() error {
		c := &dns.Client{Net: "tcp", Timeout: 5 * time.Second}
		m := new(dns.Msg)
		m.SetQuestion(p.headless, dns.TypeA)
		resp, _, err := c.ExchangeContext(ctx, m, p.node.IP.String()+":53")
		if err != nil {
			return err
		}
		records, answered = len(resp.Answer), time.Now()
		return nil
	})
	if err != nil {
		return 0, 0, answered, fmt.Errorf("asking the node's DNS: %w", err)
	}
	endpoints = -1
	for _, vip := range p.vips {
		out, err := p.node.NS.Exec("nft", "get", "element", "ip", "mcsd", "service-ips", "{", vip, ".", "tcp", ".", "80", "}")
		if err != nil {
			return 0, 0, answered, fmt.Errorf("reading %s from nftables: %v: %s", vip, err, out)
		}
		n, err := lbCount(out)
		if err != nil {
			return 0, 0, answered, err
		}
		if endpoints < 0 || n < endpoints {
			endpoints = n
		}
	}
	return records, endpoints, answered, nil
}

var lbChain = regexp.MustCompile(`goto lb-tcp-(\d+)`)

func lbCount(nft string) (int, error) {
	m := lbChain.FindStringSubmatch(nft)
	if m == nil {
		return 0, fmt.Errorf("no load-balancing verdict in %q", nft)
	}
	return strconv.Atoi(m[1])
}

// waitServed waits until DNS and nftables serve every cluster's endpoints.
func (p *dropProbe) waitServed(ctx context.Context) error {
	all := p.sc.clusters * p.sc.endpoints
	var records, endpoints int
	var err error
	if werr := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 10*time.Minute, true, func(ctx context.Context) (bool, error) {
		records, endpoints, _, err = p.counts(ctx)
		return err == nil && records == all && endpoints == all, nil
	}); werr != nil {
		return fmt.Errorf("the data plane never served every cluster: %d A records, %d endpoints, want %d (%v)", records, endpoints, all, err)
	}
	return nil
}

// waitGone waits until the dead cluster's endpoints are gone from DNS and
// from nftables, and returns how long after its last renewal each went.
func (p *dropProbe) waitGone(ctx context.Context, lastRenewal time.Time) (dnsGone, nftGone time.Duration, err error) {
	live := (p.sc.clusters - 1) * p.sc.endpoints
	var records, endpoints int
	werr := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		var answered time.Time
		records, endpoints, answered, err = p.counts(ctx)
		if err != nil {
			return false, nil
		}
		// Each taken when that part answered: nftables is read last.
		if dnsGone == 0 && records == live {
			dnsGone = answered.Sub(lastRenewal)
		}
		if nftGone == 0 && endpoints == live {
			nftGone = time.Since(lastRenewal)
		}
		return dnsGone > 0 && nftGone > 0, nil
	})
	if werr != nil {
		return 0, 0, fmt.Errorf("the dead cluster's endpoints stayed: %d A records, %d endpoints, want %d (%v)", records, endpoints, live, err)
	}
	return dnsGone, nftGone, nil
}
