//go:build tools

// Package kind pins the kind release the kind tests (test/kind) run where
// no kind is installed, and whose base image files (images/base) the node
// image they build is assembled from. It is its own module so that kind's
// dependencies never enter mcsd's go.mod or the other tools modules.
package kind

import (
	_ "sigs.k8s.io/kind"
)
