// Package proxier is the data plane for ClusterSetIPs: it programs nftables so
// that traffic to the VIP of a ServiceImport reaches the endpoints of every
// cluster that exports the service, in the manner of kube-proxy's nftables
// mode. It is a library: a CNI (or mcsd's own node daemon) feeds it
// ServiceImports and MCS EndpointSlices from its own informers and runs its
// sync loop.
//
// The proxier owns one nftables table per IP family, named [TableName], and
// nothing outside it. It reads nothing from the API server itself, and it
// must not depend on mcsd's exporter, importer or dns packages; the importer
// depends on it instead, for the EndpointSlice contract ([ServicePortsAnnotation]).
//
// See README.md in this directory for the netfilter hooks used, the rules
// written, and the contract on MCS EndpointSlices.
package proxier
