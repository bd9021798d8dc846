package proxier

import (
	"strconv"
	"time"
)

// Names of everything the proxier creates in nftables. There is one table per
// IP family ("ip mcsd" and "ip6 mcsd"), so no object inside needs a prefix of
// its own. README.md shows where each one sits in the packet path.
const (
	// TableName is the name of the proxier's nftables table in each family.
	TableName = "mcsd"

	// Base chains, named "<type>-<hook>" (declared in baseChains).
	filterInputChain    = "filter-input"
	filterForwardChain  = "filter-forward"
	filterOutputChain   = "filter-output"
	natPreroutingChain  = "nat-prerouting"
	natOutputChain      = "nat-output"
	natPostroutingChain = "nat-postrouting"

	// Dispatch: servicesChain marks traffic for masquerading and looks the
	// destination up in serviceIPsMap ("daddr . l4proto . dport" ->
	// "goto lb-..."), one O(1) lookup for every ClusterSetIP port.
	servicesChain = "services"
	serviceIPsMap = "service-ips"

	// clustersetIPsSet holds every ClusterSetIP this proxier programs.
	clustersetIPsSet = "clusterset-ips"

	// Service ports without usable endpoints: endpointsCheckChain looks the
	// destination up in noEndpointServicesMap, whose verdict is
	// "goto reject-chain" (no endpoints anywhere) or "drop"
	// (internalTrafficPolicy Local without local endpoints).
	endpointsCheckChain   = "service-endpoints-check"
	noEndpointServicesMap = "no-endpoint-services"
	rejectChain           = "reject-chain"

	// clustersetIPsCheckChain rejects new traffic still addressed to a
	// ClusterSetIP after DNAT had its chance: a port the service does not
	// have.
	clustersetIPsCheckChain = "clusterset-ips-check"

	// masqueradingChain masquerades marked packets and hairpin connections
	// (an endpoint that reached itself through the VIP), the latter listed
	// as "ip . ip . proto . port" in hairpinConnectionsSet.
	masqueradingChain     = "masquerading"
	hairpinConnectionsSet = "hairpin-connections"

	// Load balancing. No object belongs to one service: the map
	// "backends-<protocol>" holds every endpoint of every service port of
	// that protocol, keyed "ClusterSetIP . port . index" with
	// "address . port" as value, and a service port's service-ips entry is
	// a goto to the chain shared by every service port of its protocol and
	// endpoint count N, "lb-<protocol>-<N>", which DNATs to
	// "<key built from the packet> . numgen random mod N" looked up in the
	// map. Few rules reference a backends map (one per chain), because the
	// kernel checks each element added to a map against every rule bound to
	// it.
	backendsMapPrefix = "backends-"
	lbChainPrefix     = "lb-"

	// ClientIP session affinity: affinitySet remembers, for each recent
	// client, the endpoint index it was sent to, as
	// "client . ClusterSetIP . protocol . port . index" with the import's
	// timeout. "lb-<protocol>-<N>-affinity-<T>" (T the timeout in seconds)
	// sends a remembered client back to its index and balances the others
	// over "backend-<protocol>-<index>-affinity-<T>", which records the
	// client and DNATs to that index.
	affinitySet        = "affinity"
	affinityChainInfix = "-affinity-"
	backendChainPrefix = "backend-"
)

// backendsMapName is the map of the endpoints of every service port of a
// protocol ("tcp", "udp" or "sctp").
func backendsMapName(proto string) string { return backendsMapPrefix + proto }

// lbChainName is the chain that balances over n endpoints of a protocol
// ("tcp", "udp" or "sctp"), with ClientIP affinity when timeout is not zero.
func lbChainName(proto string, n int, timeout time.Duration) string {
	name := lbChainPrefix + proto + "-" + strconv.Itoa(n)
	if timeout > 0 {
		name += affinityChainInfix + strconv.FormatInt(int64(timeout/time.Second), 10)
	}
	return name
}

// backendChainName is the chain that records an affine client of endpoint
// index i and DNATs it there.
func backendChainName(proto string, i int, timeout time.Duration) string {
	return backendChainPrefix + proto + "-" + strconv.Itoa(i) + affinityChainInfix + strconv.FormatInt(int64(timeout/time.Second), 10)
}
