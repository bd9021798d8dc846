package proxier

import (
	"crypto/sha256"
	"encoding/base32"
	"fmt"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/knftables"
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
	// "goto service-..."), one O(1) lookup for every ClusterSetIP port.
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

	// Per-service objects. A service port's chain is
	// "service-<hash>-<namespace>/<name>/<protocol>/<port>"; with ClientIP
	// session affinity each endpoint gets a chain
	// "endpoint-<hash>-<namespace>/<name>/<protocol>/<port>__<ip>/<port>"
	// and a set of recent clients "affinity-<hash>-..." with the same
	// suffix (its hash covers the affinity timeout too, so a new timeout is
	// a new set). Only these names contain a "/".
	serviceChainPrefix  = "service-"
	endpointChainPrefix = "endpoint-"
	affinitySetPrefix   = "affinity-"
)

// nameBaseMax leaves room for the longest prefix within nftables' name limit.
const nameBaseMax = knftables.NameLengthMax - len(endpointChainPrefix)

// hashedName returns "<hash>-<name>", truncated to nameBaseMax. The hash of
// hashInput keeps names unique even when truncated and tells apart at a glance
// names that differ in one digit.
func hashedName(name, hashInput string) string {
	sum := sha256.Sum256([]byte(hashInput))
	name = base32.StdEncoding.EncodeToString(sum[:])[:8] + "-" + name
	if len(name) > nameBaseMax {
		name = name[:nameBaseMax-3] + "..."
	}
	return name
}

// servicePortBase is "<namespace>/<name>/<protocol>/<port>". Namespaces,
// names and protocols only use [a-z0-9-], so they are safe in chain names,
// and "/" (allowed in nftables names, not in theirs) separates them.
func servicePortBase(svc types.NamespacedName, protocol v1.Protocol, port int32) string {
	return fmt.Sprintf("%s/%s/%s/%d", svc.Namespace, svc.Name, strings.ToLower(string(protocol)), port)
}

func serviceChainName(svc types.NamespacedName, protocol v1.Protocol, port int32) string {
	base := servicePortBase(svc, protocol, port)
	return serviceChainPrefix + hashedName(base, base)
}

// endpointBase is servicePortBase + "__<ip>/<port>"; an IPv6 address has its
// colons (not allowed in names) replaced by dots.
func endpointBase(svc types.NamespacedName, protocol v1.Protocol, port int32, ep endpoint) string {
	return fmt.Sprintf("%s__%s/%d", servicePortBase(svc, protocol, port), strings.ReplaceAll(ep.ip.String(), ":", "."), ep.port)
}

func endpointChainName(svc types.NamespacedName, protocol v1.Protocol, port int32, ep endpoint) string {
	base := endpointBase(svc, protocol, port, ep)
	return endpointChainPrefix + hashedName(base, base)
}

func affinitySetName(svc types.NamespacedName, protocol v1.Protocol, port int32, ep endpoint, timeout time.Duration) string {
	base := endpointBase(svc, protocol, port, ep)
	return affinitySetPrefix + hashedName(base, fmt.Sprintf("%s@%ds", base, int64(timeout/time.Second)))
}

// isServiceObjectName says whether a chain or set name is one of the
// per-service ones (the static names have no "/").
func isServiceObjectName(name string) bool { return strings.Contains(name, "/") }
