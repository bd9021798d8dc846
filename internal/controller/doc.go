// Package controller is the skeleton mcsd's controllers share, in client-go's
// sample-controller shape, written once: the clients and settings every
// controller of a cluster is built with (Shared), and a Base holding a
// rate-limited workqueue of namespace/name keys with a pool of workers that
// run one idempotent sync per key (queue.go, worker.go), the metrics of
// syncs and writes with the gauge of the objects' conditions
// (conditiongauge.go), the event recorder (events.go), the event handlers it registers on informers it is handed,
// and whether its caches have synced. The controllers (exporter, importer)
// are handed their informers (internal/caches) and add what is theirs:
// indexes, handlers, and the sync.
//
// It knows nothing of what a sync does, and builds no informer.
package controller
