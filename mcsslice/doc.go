// Package mcsslice is the contract on the MCS EndpointSlices of a member
// cluster: the importer writes them, and a data plane (mcsd's DNS server and
// proxier, or a CNI embedding the proxier) reads them. It says how they are
// labelled and named, how to select them, what the ServicePorts annotation
// holds, and how a data plane withholds the endpoints of a cluster that is
// gone (GoneClusters).
//
// It is a leaf: the writer and the readers import it, never each other. It
// reads and writes nothing itself.
package mcsslice
