package scale

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"sync"
	"time"

	"github.com/miekg/dns"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/mcsd-io/mcsd/nsenter"
	"github.com/mcsd-io/mcsd/test/lib/harness"
	"github.com/mcsd-io/mcsd/test/lib/netns"
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

func newDropProbe(node *harness.Node, sc scenario) *dropProbe {
	p := &dropProbe{node: node, sc: sc, headless: "svc-00000." + namespaceOf(0) + ".svc.clusterset.local."}
	for _, i := range []int{1, sc.services / 2, sc.services - 1} {
		if i%headlessEvery == 0 {
			i++
		}
		p.vips = append(p.vips, vipOf(i).String())
	}
	return p
}

// dnsRecords returns the headless service's A records, asked over TCP from
// inside the node.
func (p *dropProbe) dnsRecords(ctx context.Context) (int, error) {
	records := 0
	err := nsenter.Do(netns.Path(p.node.NS.Name), func() error {
		c := &dns.Client{Net: "tcp", Timeout: 5 * time.Second}
		m := new(dns.Msg)
		m.SetQuestion(p.headless, dns.TypeA)
		resp, _, err := c.ExchangeContext(ctx, m, p.node.IP.String()+":53")
		if err != nil {
			return err
		}
		if resp.Rcode != dns.RcodeSuccess {
			return fmt.Errorf("%s: %s", p.headless, dns.RcodeToString[resp.Rcode])
		}
		records = len(resp.Answer)
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("asking the node's DNS: %w", err)
	}
	return records, nil
}

// nftEndpoints returns the smallest endpoint count of the sample ports.
// It lists the map once: nft's "get element" first fetches every element
// of every set in the table, seconds at this scale, and would compete with
// the proxier it is timing.
func (p *dropProbe) nftEndpoints() (int, error) {
	out, err := p.node.NS.Exec("nft", "list", "map", "ip", "mcsd", "service-ips")
	if err != nil {
		return 0, fmt.Errorf("listing the service-ips map: %v: %s", err, out)
	}
	endpoints := -1
	for _, vip := range p.vips {
		n, err := lbCount(out, vip)
		if err != nil {
			return 0, err
		}
		if endpoints < 0 || n < endpoints {
			endpoints = n
		}
	}
	return endpoints, nil
}

// lbCount reads the endpoint count of vip's TCP port 80 from a listing of
// the service-ips map: the number in the name of its load-balancing chain.
func lbCount(listing, vip string) (int, error) {
	element := regexp.MustCompile(`(?:^|[\s{,])` + regexp.QuoteMeta(vip) + `\s*\.\s*tcp\s*\.\s*80\s*:\s*goto lb-tcp-(\d+)`)
	m := element.FindStringSubmatch(listing)
	if m == nil {
		return 0, fmt.Errorf("no load-balancing verdict for %s tcp/80 in the service-ips map", vip)
	}
	return strconv.Atoi(m[1])
}

// waitServed waits until DNS and nftables serve every cluster's endpoints.
func (p *dropProbe) waitServed(ctx context.Context) error {
	all := p.sc.clusters * p.sc.endpoints
	var records, endpoints int
	var dnsErr, nftErr error
	if werr := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 10*time.Minute, true, func(ctx context.Context) (bool, error) {
		records, dnsErr = p.dnsRecords(ctx)
		endpoints, nftErr = p.nftEndpoints()
		return dnsErr == nil && nftErr == nil && records == all && endpoints == all, nil
	}); werr != nil {
		return fmt.Errorf("the data plane never served every cluster: %d A records (%v), %d endpoints (%v), want %d", records, dnsErr, endpoints, nftErr, all)
	}
	return nil
}

// waitGone waits until the dead cluster's endpoints are gone from DNS and
// from nftables, each watched on its own so that neither's slowness or
// errors delay the other's figure, and returns how long after its last
// renewal each went, and the errors the probes met meanwhile.
func (p *dropProbe) waitGone(ctx context.Context, lastRenewal time.Time) (dnsGone, nftGone time.Duration, errs []string, err error) {
	live := (p.sc.clusters - 1) * p.sc.endpoints
	var mu sync.Mutex
	watch := func(what string, count func(context.Context) (int, error)) (time.Duration, error) {
		var last int
		werr := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
			n, err := count(ctx)
			if err != nil {
				mu.Lock()
				if len(errs) < 5 {
					errs = append(errs, fmt.Sprintf("%s at +%.1f s: %v", what, time.Since(lastRenewal).Seconds(), err))
				}
				mu.Unlock()
				return false, nil
			}
			last = n
			return n == live, nil
		})
		if werr != nil {
			return 0, fmt.Errorf("the dead cluster's endpoints stayed in %s: %d, want %d", what, last, live)
		}
		return time.Since(lastRenewal), nil
	}
	var dnsErr, nftErr error
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); dnsGone, dnsErr = watch("DNS", p.dnsRecords) }()
	go func() {
		defer wg.Done()
		nftGone, nftErr = watch("nftables", func(context.Context) (int, error) { return p.nftEndpoints() })
	}()
	wg.Wait()
	return dnsGone, nftGone, errs, errors.Join(dnsErr, nftErr)
}
