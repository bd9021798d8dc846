//go:build tools

// Package tools pins the Kubernetes components the test harness runs, so
// they are built from the same module graph at a fixed version. kube-proxy
// is not run by the harness: it is the baseline the proxier is measured
// against (make bench-proxier).
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-proxy"
)
