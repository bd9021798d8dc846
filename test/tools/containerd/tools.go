//go:build tools

// Package containerd pins the containerd release the harness's real nodes
// run (test/lib/harness RealNodes): the daemon, its runc shim and ctr, which
// imports images into a node. It is its own module so that containerd and
// its dependencies never enter mcsd's go.mod or the Kubernetes tools module.
package containerd

import (
	_ "github.com/containerd/containerd/v2/cmd/containerd"
	_ "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2"
	_ "github.com/containerd/containerd/v2/cmd/ctr"
)
