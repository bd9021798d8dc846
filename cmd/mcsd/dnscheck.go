package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"

	"github.com/mcsd-io/mcsd/nsenter"
)

// dnsAnswers is the node agent's check that its DNS server answers: a query
// for the zone's SOA on the server's own UDP socket, sent from inside
// --netns as the node's pods send theirs. Any answer counts, SERVFAIL too:
// the server gives it until its index has synced, which readiness reports
// (dns-synced) and a restart would not hasten. No answer means the readers
// are blocked or gone, which only a restart mends: it is a liveness check.
type dnsAnswers struct {
	netns string
	zone  string
	// try bounds one query; a check makes up to tries of them, so that one
	// datagram lost under load fails nothing.
	try   time.Duration
	tries int
	// addr is where the server's UDP sockets are bound; nil until it
	// serves.
	addr atomic.Pointer[net.UDPAddr]
}

func newDNSAnswers(netns, zone string) *dnsAnswers {
	return &dnsAnswers{netns: netns, zone: zone, try: time.Second, tries: 2}
}

// serving records the address the server's UDP sockets are bound to.
func (c *dnsAnswers) serving(addr net.Addr) {
	if a, ok := addr.(*net.UDPAddr); ok {
		c.addr.Store(a)
	}
}

// Name implements healthz.HealthChecker.
func (c *dnsAnswers) Name() string { return "dns-answers" }

// Check implements healthz.HealthChecker.
func (c *dnsAnswers) Check(r *http.Request) error {
	addr := c.addr.Load()
	if addr == nil {
		return errors.New("dns: not serving yet")
	}
	target := selfAddress(addr)
	ctx := context.Background()
	if r != nil {
		ctx = r.Context()
	}
	var err error
	for range c.tries {
		tryCtx, cancel := context.WithTimeout(ctx, c.try)
		_, err = exchange(tryCtx, c.netns, "udp", target, soaQuery(c.zone))
		cancel()
		if err == nil {
			return nil
		}
	}
	return fmt.Errorf("dns: no answer from the server's own socket %s in %d tries of %v: %w", target, c.tries, c.try, err)
}

// selfAddress is where to reach a socket bound to addr from the same
// network namespace: addr itself, or loopback when it is the unspecified
// address.
func selfAddress(addr *net.UDPAddr) string {
	ip := addr.IP
	switch {
	case ip == nil || ip.Equal(net.IPv4zero):
		ip = net.IPv4(127, 0, 0, 1)
	case ip.Equal(net.IPv6unspecified):
		ip = net.IPv6loopback
	}
	return net.JoinHostPort(ip.String(), fmt.Sprint(addr.Port))
}

// soaQuery asks for the SOA record of zone, which every server of the zone
// holds.
func soaQuery(zone string) *dns.Msg {
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(strings.ToLower(zone)), dns.TypeSOA)
	return m
}

// exchange sends m to address over network (udp or tcp) from inside the
// network namespace netns (empty: this one) and returns the answer, which
// must carry m's ID; ctx bounds the whole exchange.
func exchange(ctx context.Context, netns, network, address string, m *dns.Msg) (*dns.Msg, error) {
	var conn net.Conn
	err := nsenter.Do(netns, func() error {
		var d net.Dialer
		var err error
		conn, err = d.DialContext(ctx, network, address)
		return err
	})
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	if deadline, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(deadline)
	}
	c := &dns.Client{Net: network}
	r, _, err := c.ExchangeWithConnContext(ctx, m, &dns.Conn{Conn: conn})
	return r, err
}
