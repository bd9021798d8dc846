// Package proxier programs nftables so that ClusterSetIPs of ServiceImports
// reach the endpoints of every exporting cluster, in the manner of
// kube-proxy's nftables mode. It is a library: a CNI can embed it and feed it
// ServiceImports and EndpointSlices from its own informers. It must not
// depend on the exporter, importer or dns packages.
package proxier
