// Package proxier is the data plane for ClusterSetIPs: it programs nftables
// (or, in iptables mode, iptables) so that traffic to the VIP of a
// ServiceImport reaches the endpoints of every cluster that exports the
// service, in the manner of kube-proxy's nftables (iptables) mode. It is a
// library: a CNI (or mcsd's own node daemon) feeds it ServiceImports and MCS
// EndpointSlices from its own informers and runs its sync loop.
//
// In nftables mode the proxier owns one nftables table per IP family, named
// [TableName], and nothing outside it; in iptables mode it owns the chains
// named "MCSD-..." of the nat and filter tables and one jump to them from
// each built-in chain it hooks. Both modes share the change tracking, the
// choice of endpoints, the VIP report, conntrack cleanup and metrics. It
// reads nothing from the API server itself, and it must not depend on mcsd's
// exporter, importer or dns packages: the contract on the EndpointSlices it
// reads, which the importer writes, is package mcsslice's.
//
// See README.md in this directory for the netfilter hooks used, the rules
// written, and the contract on MCS EndpointSlices.
package proxier
