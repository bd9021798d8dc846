package diagnose

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/mcsd-io/mcsd/kubectlmcs/verify"
)

// What the reachability probes found is judged here, without an API
// server: whether a pod of one member connected to a pod of another, and
// when it did not, which way is broken and which route to add, named by
// the members' pod CIDRs as declared on the broker and their nodes' pod
// subnets. reach.go runs the probes.

// flatNetworkDoc is the page on making members' pod networks reach each
// other, named in every fix.
const flatNetworkDoc = "docs/install/flat-network.md"

// probeEnd is one end of a crossing: a probe pod of a member.
type probeEnd struct {
	// Cluster is the member's cluster ID.
	Cluster string
	IP      netip.Addr
	Node    string
}

func (e probeEnd) String() string { return fmt.Sprintf("pod %s (node %s)", e.IP, e.Node) }

// nodeRoute is one node's share of its cluster's pod network: the pod
// subnets it holds (its spec.podCIDRs) and its address, which other
// clusters route them via.
type nodeRoute struct {
	Node    string
	IP      netip.Addr
	Subnets []netip.Prefix
}

// crossing is one direction of the probe: a pod of From connecting to the
// probe pod of To, sending it datagrams alongside.
type crossing struct {
	From, To probeEnd
	Port     int32
	// Result is the TCP connection's.
	Result verify.Result
	// Arrived says whether To's probe logged a datagram of From's pod;
	// ArrivedFrom is its source address there.
	Arrived     bool
	ArrivedFrom netip.Addr
}

// podNetworks is what the judge knows of the members' pod networks.
type podNetworks struct {
	// Declared is each member's pod CIDRs as declared on the broker; nil
	// when the broker could not be read.
	Declared map[string][]netip.Prefix
	// Nodes is each member's nodes; a member absent, or nodes without pod
	// subnets, and a fix names no node.
	Nodes map[string][]nodeRoute
}

// reachName is the name of the check of the direction from -> to.
func reachName(from, to string) string { return "pod reachability " + from + " -> " + to }

// judge makes the check of one crossing.
func (n podNetworks) judge(c crossing) Check {
	check := Check{Name: reachName(c.From.Cluster, c.To.Cluster)}
	var problems, fixes []string
	if outside := n.undeclared(c.To); outside != "" {
		problems = append(problems, outside)
		fixes = append(fixes, fmt.Sprintf("join %s again with --pod-cidrs that hold its pods' addresses (kubectl mcs join --pod-cidrs ...)", c.To.Cluster))
	}
	to := c.To.Cluster + "'s " + c.To.String()
	via := fmt.Sprintf("(%s)", c.Result.Error)
	switch {
	case c.Result.OK():
		detail := fmt.Sprintf("%s connects to %s in %s in %.1f ms", c.From, to, n.cidr(c.To), c.Result.ConnectMS)
		if c.Arrived && c.ArrivedFrom != c.From.IP {
			detail += fmt.Sprintf(", seen there from %s (%s masquerades its pods' traffic)", c.ArrivedFrom, c.From.Cluster)
		}
		problems = append([]string{detail}, problems...)
	case strings.Contains(c.Result.Error, "connection refused"):
		problems = append(problems, fmt.Sprintf("cluster %s: %s is refused by %s on port %d, where the probe listens: a firewall or NetworkPolicy rejects it %s",
			c.From.Cluster, c.From, to, c.Port, via))
		fixes = append(fixes, fmt.Sprintf("let TCP from %s to %s through the NetworkPolicies of %s's namespace %s and the firewalls between; see %s",
			n.cidr(c.From), n.cidr(c.To), c.To.Cluster, mcsdNamespace, flatNetworkDoc))
	case !c.Arrived:
		problems = append(problems, fmt.Sprintf("cluster %s: no route from %s to %s: neither a connection to %s nor a datagram reached it %s",
			c.From.Cluster, c.From, n.cidr(c.To), to, via))
		fixes = append(fixes, n.routeFix(c.From.Cluster, c.To))
	case c.ArrivedFrom != c.From.IP:
		problems = append(problems, fmt.Sprintf("cluster %s: %s reaches %s (its datagrams arrive, from %s: %s masquerades), but TCP connections to port %d fail: a firewall or NetworkPolicy drops them %s",
			c.From.Cluster, c.From, to, c.ArrivedFrom, c.From.Cluster, c.Port, via))
		fixes = append(fixes, fmt.Sprintf("let TCP from %s's nodes and pods to %s through the NetworkPolicies of %s's namespace %s and the firewalls between; see %s",
			c.From.Cluster, n.cidr(c.To), c.To.Cluster, mcsdNamespace, flatNetworkDoc))
	default:
		problems = append(problems, fmt.Sprintf("cluster %s: no route back from %s to %s: %s's %s reaches it (its datagrams arrive) but its connections get no answer %s",
			c.To.Cluster, c.To, n.cidr(c.From), c.From.Cluster, c.From, via))
		fixes = append(fixes, n.routeFix(c.To.Cluster, c.From))
	}
	check.Result = Pass
	if !c.Result.OK() || len(fixes) > 0 {
		check.Result = Fail
		check.Fix = strings.Join(fixes, "; also ")
	}
	check.Detail = strings.Join(problems, "; ")
	return check
}

// declared is the CIDR of the member's declaration that holds ip.
func (n podNetworks) declared(cluster string, ip netip.Addr) (netip.Prefix, bool) {
	for _, p := range n.Declared[cluster] {
		if p.Contains(ip) {
			return p, true
		}
	}
	return netip.Prefix{}, false
}

// cidr names the declared pod CIDR that holds e's address, or says why it
// cannot.
func (n podNetworks) cidr(e probeEnd) string {
	if p, ok := n.declared(e.Cluster, e.IP); ok {
		return fmt.Sprintf("%s's pod CIDR %s (declared by %s on the broker)", e.Cluster, p, e.Cluster)
	}
	return fmt.Sprintf("%s's pod address %s", e.Cluster, e.IP)
}

// undeclared says how e's address lies outside its member's declaration,
// or "" when it lies inside (or the declarations are unknown).
func (n podNetworks) undeclared(e probeEnd) string {
	if n.Declared == nil {
		return ""
	}
	if _, ok := n.declared(e.Cluster, e.IP); ok {
		return ""
	}
	cidrs, ok := n.Declared[e.Cluster]
	if !ok {
		return fmt.Sprintf("%s has no declaration on the broker, which refuses its endpoints", e.Cluster)
	}
	return fmt.Sprintf("%s's %s lies outside %s's declared pod CIDRs %s: the broker refuses its endpoints there", e.Cluster, e, e.Cluster, joinPrefixes(cidrs))
}

// routeFix says what to add so that the nodes of cluster reach to's pods:
// a route to to's declared pod CIDR via to's nodes, each node's subnet by
// name where the nodes have subnets.
func (n podNetworks) routeFix(cluster string, to probeEnd) string {
	dest := to.IP.String()
	if p, ok := n.declared(to.Cluster, to.IP); ok {
		dest = p.String()
	}
	var routes []string
	where := ""
	for _, node := range n.Nodes[to.Cluster] {
		if node.IP.Is4() != to.IP.Is4() {
			continue
		}
		if node.Node == to.Node {
			where = fmt.Sprintf(" (%s's pod %s is on node %s, %s)", to.Cluster, to.IP, node.Node, node.IP)
		}
		for _, s := range node.Subnets {
			if s.Addr().Is4() == to.IP.Is4() {
				routes = append(routes, fmt.Sprintf("ip route add %s via %s (%s's node %s)", s, node.IP, to.Cluster, node.Node))
			}
		}
	}
	slices.Sort(routes)
	if len(routes) == 0 {
		// No node says which subnet it holds (the CNI keeps it, or the
		// pods' addresses are the network's own).
		return fmt.Sprintf("on %s's nodes (or the router of their network), route %s to the node of %s that holds each address%s, and let it through firewalls; where pod addresses are the network's own (VPC-native CNIs), peer the networks and allow %s; see %s",
			cluster, dest, to.Cluster, where, dest, flatNetworkDoc)
	}
	const most = 4
	if len(routes) > most {
		routes = append(routes[:most], fmt.Sprintf("and %d more", len(routes)-most))
	}
	return fmt.Sprintf("on %s's nodes, add a route to %s via a node of %s: %s; and let it through firewalls; see %s",
		cluster, dest, to.Cluster, strings.Join(routes, ", "), flatNetworkDoc)
}
