//go:build tools

// Package etcd pins the etcd release kubeadm v1.36 runs (its etcd image
// 3.6.8-0), for the etcd image of the kind node image the kind tests build
// (test/lib/kindnode). It is its own module so that etcd's dependencies
// never enter mcsd's go.mod or the other tools modules.
package etcd

import (
	_ "go.etcd.io/etcd/server/v3"
)
