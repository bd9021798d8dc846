// Package importer imports the clusterset's services into this cluster. It
// reads every cluster's export records, EndpointSlices and heartbeat Leases
// from the broker, merges the records of each service with the same
// function the exporters use (internal/merge), and makes this cluster hold
// the result: a ServiceImport in the service's namespace (when that
// namespace exists), with status.clusters and a Ready condition, and MCS
// EndpointSlices that mirror the endpoints of every live contributing
// cluster.
//
// A cluster whose Lease this importer has not seen renewed for the cluster
// TTL is dead: its endpoints leave the service until the Lease is renewed
// again. Losing the broker is not losing the clusters: while the broker
// does not answer, the importer keeps the last known state, drops nobody
// and deletes nothing.
//
// Members trust the broker, not each other: the importer ignores what a
// compromised member could slip past the broker's admission policy. A
// record's ClusterSetIP counts only inside the clusterset ranges and a
// block its cluster owns; remote endpoints only inside their cluster's
// declared pod CIDRs, and without nodeName, targetRef or hints; a record
// counts from when the broker stored it, whatever it declares; denied
// namespaces (kube-system) are never imported; one cluster's records are
// capped; a cluster seen first long after its last renewal is dead; and a
// cluster gone past a grace stops deciding its services' spec.
//
// The importer owns what it writes: hand edits of a ServiceImport's spec,
// of the labels and annotations it set, or of its EndpointSlices are
// reverted. It never writes to the broker, never allocates ClusterSetIPs
// (the exporters do) and never touches DNS or the data plane.
//
// docs/importer.md describes the objects it writes and the TTL rules.
package importer
