// Package netfilter is how the proxier reaches the parts of the kernel's
// netfilter it does not program through nft: iptables (iptables mode's
// rules, by the iptables commands), the conntrack table (stale datagram
// entries, over netlink) and the rule count of one nftables chain (the
// table check, over netlink). Each is an interface with one real
// implementation, so that the proxier's tests pass fakes and a benchmark
// can wrap the real one to see what the proxier writes.
//
// It knows nothing of ServiceImports, EndpointSlices or the rules' layout:
// what to write and when is package proxier's.
package netfilter
