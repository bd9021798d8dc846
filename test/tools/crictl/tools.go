//go:build tools

// Package crictl pins the crictl release of the kind node image the kind
// tests build (test/kind), the one kind's own base image ships. It is its
// own module so that cri-tools' dependencies never enter mcsd's go.mod or
// the other tools modules.
package crictl

import (
	_ "sigs.k8s.io/cri-tools/cmd/crictl"
)
