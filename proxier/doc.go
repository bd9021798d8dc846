// Package proxier is the data plane for ClusterSetIPs: it programs nftables
// (or, in iptables mode, iptables) so that traffic to the VIP of a
// ServiceImport reaches the endpoints of every cluster that exports the
// service, in the manner of kube-proxy's nftables (iptables) mode. It is a
// library: a CNI (or mcsd's own node daemon) feeds it ServiceImports and MCS
// EndpointSlices from its own informers and runs its sync loop.
//
// An embedder needs:
//
//   - [New] (one IP family) or [NewDualStack] (both), configured by a
//     [Config]; each result ([Proxier], [DualStack]) is a [Provider], whose
//     SyncLoop applies changes;
//   - [NewFeed], which hands a Provider every change of the embedder's
//     informers ([Feed.Run] reports the initial lists, [Feed.SetGoneClusters]
//     withholds the endpoints of clusters that are gone);
//   - [Config.Registerer] for the metrics, and the observers [VIPObserver]
//     (which ClusterSetIPs the committed rules carry) and [HealthRecorder]
//     ([NewHealth] is a ready-made one);
//   - [CheckRequirements], to learn before [New] whether a [Mode] works on
//     this host, and [CleanupLeftovers], to delete the rules for good.
//
// The kernel interfaces the proxier makes for itself (iptables, conntrack,
// the rule counter) are package
// [github.com/mcsd-io/mcsd/proxier/netfilter]'s; [Config] takes others for
// tests and benchmarks.
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
