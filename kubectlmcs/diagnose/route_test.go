package diagnose

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/mcsd-io/mcsd/kubectlmcs/verify"
)

var (
	eastPod = probeEnd{Cluster: "east", IP: netip.MustParseAddr("10.1.0.5"), Node: "e1"}
	westPod = probeEnd{Cluster: "west", IP: netip.MustParseAddr("10.2.1.7"), Node: "w1"}

	timeout = verify.Result{Target: "10.2.1.7:8080", Error: "connect: dial tcp 10.2.1.7:8080: i/o timeout", Attempts: 2}
	joined  = verify.Result{Target: "10.2.1.7:8080", Reply: "west mcsd-diagnose-serve-x", ConnectMS: 0.4, Attempts: 1}
)

// clusterset is two members with /16s declared, each of two nodes holding
// a /24 of it.
func clusterset() podNetworks {
	return podNetworks{
		Declared: map[string][]netip.Prefix{
			"east": {netip.MustParsePrefix("10.1.0.0/16")},
			"west": {netip.MustParsePrefix("10.2.0.0/16")},
		},
		Nodes: map[string][]nodeRoute{
			"east": {
				{Node: "e1", IP: netip.MustParseAddr("172.18.0.2"), Subnets: []netip.Prefix{netip.MustParsePrefix("10.1.0.0/24")}},
				{Node: "e2", IP: netip.MustParseAddr("172.18.0.3"), Subnets: []netip.Prefix{netip.MustParsePrefix("10.1.1.0/24")}},
			},
			"west": {
				{Node: "w1", IP: netip.MustParseAddr("172.18.0.4"), Subnets: []netip.Prefix{netip.MustParsePrefix("10.2.1.0/24")}},
				{Node: "w2", IP: netip.MustParseAddr("172.18.0.5"), Subnets: []netip.Prefix{netip.MustParsePrefix("10.2.2.0/24")}},
			},
		},
	}
}

func TestJudgeNamesTheMissingRoute(t *testing.T) {
	vpcNative := clusterset()
	vpcNative.Nodes = map[string][]nodeRoute{"west": {{Node: "w1", IP: netip.MustParseAddr("192.168.0.4")}}}
	unknown := clusterset()
	unknown.Declared = nil
	moved := clusterset()
	moved.Declared["west"] = []netip.Prefix{netip.MustParsePrefix("10.9.0.0/16")}
	undeclared := clusterset()
	delete(undeclared.Declared, "west")
	many := clusterset()
	for i := 3; i <= 7; i++ {
		many.Nodes["west"] = append(many.Nodes["west"], nodeRoute{
			Node: fmt.Sprintf("w%d", i), IP: netip.AddrFrom4([4]byte{172, 18, 1, byte(i)}),
			Subnets: []netip.Prefix{netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 2, byte(i), 0}), 24)},
		})
	}
	dual := clusterset()
	dual.Nodes["west"] = []nodeRoute{
		{Node: "w1", IP: netip.MustParseAddr("fd00::4"), Subnets: []netip.Prefix{netip.MustParsePrefix("fd10:2:1::/64")}},
		{Node: "w1", IP: netip.MustParseAddr("172.18.0.4"), Subnets: []netip.Prefix{netip.MustParsePrefix("10.2.1.0/24")}},
	}

	for _, tc := range []struct {
		name     string
		nets     podNetworks
		c        crossing
		result   string
		detail   []string
		fix      []string
		notInFix []string
	}{
		{
			name:   "a connection that succeeds passes, naming the CIDR crossed",
			nets:   clusterset(),
			c:      crossing{From: eastPod, To: westPod, Port: 8080, Result: joined, Arrived: true, ArrivedFrom: eastPod.IP},
			result: Pass,
			detail: []string{"pod 10.1.0.5 (node e1) connects to west's pod 10.2.1.7 (node w1) in west's pod CIDR 10.2.0.0/16 (declared by west on the broker) in 0.4 ms"},
		},
		{
			name:   "a masquerading member passes and says so",
			nets:   clusterset(),
			c:      crossing{From: eastPod, To: westPod, Port: 8080, Result: joined, Arrived: true, ArrivedFrom: netip.MustParseAddr("172.18.0.2")},
			result: Pass,
			detail: []string{"seen there from 172.18.0.2 (east masquerades its pods' traffic)"},
		},
		{
			name:   "nothing arrives: the way there lacks a route, on the connecting member's nodes",
			nets:   clusterset(),
			c:      crossing{From: eastPod, To: westPod, Port: 8080, Result: timeout},
			result: Fail,
			detail: []string{
				"cluster east: no route from pod 10.1.0.5 (node e1) to west's pod CIDR 10.2.0.0/16 (declared by west on the broker)",
				"neither a connection to west's pod 10.2.1.7 (node w1) nor a datagram reached it (connect: dial tcp 10.2.1.7:8080: i/o timeout)",
			},
			fix: []string{
				"on east's nodes, add a route to 10.2.0.0/16 via a node of west: ip route add 10.2.1.0/24 via 172.18.0.4 (west's node w1), ip route add 10.2.2.0/24 via 172.18.0.5 (west's node w2)",
				flatNetworkDoc,
			},
		},
		{
			name:   "datagrams arrive from the pod but connections get no answer: the way back lacks a route, on the other member's nodes",
			nets:   clusterset(),
			c:      crossing{From: eastPod, To: westPod, Port: 8080, Result: timeout, Arrived: true, ArrivedFrom: eastPod.IP},
			result: Fail,
			detail: []string{"cluster west: no route back from pod 10.2.1.7 (node w1) to east's pod CIDR 10.1.0.0/16 (declared by east on the broker): east's pod 10.1.0.5 (node e1) reaches it (its datagrams arrive)"},
			fix: []string{
				"on west's nodes, add a route to 10.1.0.0/16 via a node of east: ip route add 10.1.0.0/24 via 172.18.0.2 (east's node e1), ip route add 10.1.1.0/24 via 172.18.0.3 (east's node e2)",
				flatNetworkDoc,
			},
			notInFix: []string{"10.2."},
		},
		{
			name:     "datagrams arrive masqueraded but TCP fails: no route is missing, TCP is dropped",
			nets:     clusterset(),
			c:        crossing{From: eastPod, To: westPod, Port: 8080, Result: timeout, Arrived: true, ArrivedFrom: netip.MustParseAddr("172.18.0.2")},
			result:   Fail,
			detail:   []string{"its datagrams arrive, from 172.18.0.2: east masquerades", "TCP connections to port 8080 fail: a firewall or NetworkPolicy drops them"},
			fix:      []string{"let TCP from east's nodes and pods to west's pod CIDR 10.2.0.0/16"},
			notInFix: []string{"ip route add"},
		},
		{
			name:     "a refused connection is a firewall's or a NetworkPolicy's: the probe listens",
			nets:     clusterset(),
			c:        crossing{From: eastPod, To: westPod, Port: 8080, Result: verify.Result{Error: "connect: dial tcp 10.2.1.7:8080: connect: connection refused"}},
			result:   Fail,
			detail:   []string{"is refused by west's pod 10.2.1.7 (node w1) on port 8080, where the probe listens"},
			fix:      []string{"let TCP from east's pod CIDR 10.1.0.0/16 (declared by east on the broker) to west's pod CIDR 10.2.0.0/16", "NetworkPolicies of west's namespace mcsd-system"},
			notInFix: []string{"ip route add"},
		},
		{
			name:   "nodes without pod subnets (VPC-native pod addresses): the CIDR to route or peer, no node route",
			nets:   vpcNative,
			c:      crossing{From: eastPod, To: westPod, Port: 8080, Result: timeout},
			result: Fail,
			detail: []string{"no route from pod 10.1.0.5 (node e1) to west's pod CIDR 10.2.0.0/16"},
			fix:    []string{"on east's nodes (or the router of their network), route 10.2.0.0/16 to the node of west that holds each address (west's pod 10.2.1.7 is on node w1, 192.168.0.4)", "peer the networks and allow 10.2.0.0/16"},
		},
		{
			name:     "more nodes than a fix lists: the first and a count",
			nets:     many,
			c:        crossing{From: eastPod, To: westPod, Port: 8080, Result: timeout},
			result:   Fail,
			fix:      []string{"ip route add 10.2.1.0/24 via 172.18.0.4 (west's node w1)", "and 3 more"},
			notInFix: []string{"10.2.7.0/24"},
		},
		{
			name:     "routes of the probe's family only",
			nets:     dual,
			c:        crossing{From: eastPod, To: westPod, Port: 8080, Result: timeout},
			result:   Fail,
			fix:      []string{"ip route add 10.2.1.0/24 via 172.18.0.4 (west's node w1)"},
			notInFix: []string{"fd10", "fd00"},
		},
		{
			name:   "declarations unknown: the pod's address stands for the CIDR",
			nets:   unknown,
			c:      crossing{From: eastPod, To: westPod, Port: 8080, Result: timeout},
			result: Fail,
			detail: []string{"cluster east: no route from pod 10.1.0.5 (node e1) to west's pod address 10.2.1.7"},
			fix:    []string{"add a route to 10.2.1.7 via a node of west"},
		},
		{
			name:   "a probe outside its member's declaration fails even when reached",
			nets:   moved,
			c:      crossing{From: eastPod, To: westPod, Port: 8080, Result: joined, Arrived: true, ArrivedFrom: eastPod.IP},
			result: Fail,
			detail: []string{"connects to west's pod 10.2.1.7", "west's pod 10.2.1.7 (node w1) lies outside west's declared pod CIDRs 10.9.0.0/16: the broker refuses its endpoints there"},
			fix:    []string{"join west again with --pod-cidrs that hold its pods' addresses"},
		},
		{
			name:   "a member without a declaration",
			nets:   undeclared,
			c:      crossing{From: eastPod, To: westPod, Port: 8080, Result: timeout},
			result: Fail,
			detail: []string{"west has no declaration on the broker", "no route from pod 10.1.0.5 (node e1) to west's pod address 10.2.1.7"},
			fix:    []string{"join west again", "; also on east's nodes, add a route to 10.2.1.7"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.nets.judge(tc.c)
			if got.Name != "pod reachability east -> west" || got.Result != tc.result {
				t.Errorf("%s %s, want %s", got.Result, got.Name, tc.result)
			}
			for _, want := range tc.detail {
				if !strings.Contains(got.Detail, want) {
					t.Errorf("detail %q\nlacks %q", got.Detail, want)
				}
			}
			for _, want := range tc.fix {
				if !strings.Contains(got.Fix, want) {
					t.Errorf("fix %q\nlacks %q", got.Fix, want)
				}
			}
			for _, not := range tc.notInFix {
				if strings.Contains(got.Fix, not) {
					t.Errorf("fix %q\nnames %q", got.Fix, not)
				}
			}
			if (got.Result == Pass) != (got.Fix == "") {
				t.Errorf("a %s with fix %q", got.Result, got.Fix)
			}
		})
	}
}
