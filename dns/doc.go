// Package dns is mcsd's authoritative DNS server for the clusterset zone
// (clusterset.local by default) as the MCS DNS specification describes it:
// the dns-version TXT record; A/AAAA, SRV and PTR records of ClusterSetIP
// services; and for headless services the A/AAAA records of every ready
// endpoint, the <hostname>.<clusterid>.<svc>.<ns>.svc names, their SRV and
// PTR records. It is authoritative for the reverse zones (in-addr.arpa,
// ip6.arpa) of Config.ReverseCIDRs, and answers the reverse names of the
// addresses it serves outside them too.
//
// It answers from an in-memory Index that informers on the local cluster's
// ServiceImports and MCS EndpointSlices keep up to date, one service at a
// time. A query is handled in three steps, each in its own file: the question
// name is parsed into a small struct (question.go), looked up in the Index
// (index.go), and the answer is built from what was found (answer.go, the
// zone, which knows names and TTLs but not sockets). Those steps run ahead
// of queries too: when the Index publishes a service, the zone builds and
// packs the answers to every question about its names (pack.go), and the
// UDP fast path answers the common query by copying them (fast.go,
// batch_linux.go); the full path above answers the rest, with the same
// bytes for what both take.
//
// The Index is handed the embedder's informers (Index.Run), as the proxier
// is (proxier.Feed), and serves only the endpoints of clusters the liveness
// ConfigMap does not call gone (SetGoneClusters, with mcsslice.GoneClusters,
// the one filter that the proxier uses too).
//
// It must not call the API server while answering a query, must not make a
// reader wait for a writer of the Index, and must not serve
// <clusterid>.<svc>.<ns>.svc records that single out one cluster's backends.
package dns
