// Package exporter publishes this cluster's exported services to the broker.
// For every ServiceExport it writes this cluster's export record (a
// per-cluster ServiceImport, see internal/record), this cluster's endpoints
// as broker EndpointSlices, and keeps the cluster's heartbeat Lease renewed;
// it runs the shared merge over every cluster's records to set the
// ServiceExport's Valid, Ready and Conflict conditions. It writes only this
// cluster's objects on the broker and never imports.
package exporter
