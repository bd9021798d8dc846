package proxier

import (
	"crypto/sha256"
	"encoding/base32"
	"strings"
)

// Names of everything the proxier creates in iptables mode. iptables has no
// table of mcsd's own, so every chain carries the "MCSD-" prefix, never
// kube-proxy's "KUBE-": the two proxies run on the same node, and each owns
// only what carries its prefix. README.md shows where each chain sits in the
// packet path.
const (
	// iptablesChainPrefix starts every chain the proxier owns; cleanup
	// deletes exactly the chains that have it.
	iptablesChainPrefix = "MCSD-"

	// Tables.
	iptablesNAT    = "nat"
	iptablesFilter = "filter"

	// nat: iptServicesChain (jumped to from PREROUTING and OUTPUT) matches
	// each ClusterSetIP port with endpoints, one rule each, and jumps to its
	// service-port chain (iptServiceChainPrefix + hash), which marks for
	// masquerading what needs it and picks an endpoint chain
	// (iptEndpointChainPrefix + hash) that DNATs.
	iptServicesChain       = "MCSD-SERVICES"
	iptServiceChainPrefix  = "MCSD-SVC-"
	iptEndpointChainPrefix = "MCSD-SEP-"
	// iptMarkMasqChain sets the masquerade mark; iptMasqOutsideChain sends
	// there the sources outside the pod CIDRs; iptPostroutingChain
	// (jumped to from POSTROUTING) masquerades marked packets.
	iptMarkMasqChain    = "MCSD-MARK-MASQ"
	iptMasqOutsideChain = "MCSD-MASQ-OUTSIDE"
	iptPostroutingChain = "MCSD-POSTROUTING"

	// filter: iptServicesChain (the same name in the filter table, as
	// kube-proxy does; jumped to from INPUT) rejects or drops new
	// connections to ports without usable endpoints; iptFilterChain
	// (jumped to from FORWARD and OUTPUT) runs it, then rejects what is
	// still addressed to a ClusterSetIP after DNAT (a port it does not
	// have); iptRejectChain answers TCP with a reset and the rest with
	// ICMP port unreachable.
	iptFilterChain = "MCSD-FILTER"
	iptRejectChain = "MCSD-REJECT"
)

// iptablesHashChain is prefix followed by 16 characters of the base32 SHA-256
// of id, as kube-proxy names its per-service chains: 25 characters, within
// iptables' limit of 28, whatever the length of the namespace and name.
func iptablesHashChain(prefix, id string) string {
	sum := sha256.Sum256([]byte(id))
	return prefix + base32.StdEncoding.EncodeToString(sum[:])[:16]
}

// iptServiceChain is the chain of one service port, identified by
// "namespace/name/protocol/port".
func iptServiceChain(servicePort string) string {
	return iptablesHashChain(iptServiceChainPrefix, servicePort)
}

// iptEndpointChain is the chain of one endpoint ("ip:port") of one service
// port.
func iptEndpointChain(servicePort, endpoint string) string {
	return iptablesHashChain(iptEndpointChainPrefix, servicePort+"/"+endpoint)
}

// isIPTablesChain says whether a chain is one of the proxier's.
func isIPTablesChain(name string) bool { return strings.HasPrefix(name, iptablesChainPrefix) }
