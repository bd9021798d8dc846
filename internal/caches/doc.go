// Package caches builds the informers mcsd's controllers read, in client-go's
// sample-controller shape: the daemon builds one set per cluster and hands
// the exporter, the importer and the liveness controller the informers they
// need, instead of each building factories of its own. Which namespace and
// label selector each kind of object is read with, and what of it a cache
// keeps (its transform), is said here and nowhere else; the controllers add
// their own indexes and event handlers.
//
// Informers are made when first asked for, so a process running only some
// controllers watches only what they read. Ask for every informer before
// Start: a transform is set when the informer is made, and only an informer
// that exists when Start runs is started.
package caches
