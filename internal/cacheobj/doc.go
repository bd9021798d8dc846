// Package cacheobj is what mcsd does to the objects of its informer caches
// on the way in and on the way out: transforms that keep the caches lean
// (trim.go), and the unwrapping of the tombstones a delete handler may be
// handed (tombstone.go).
package cacheobj
