//go:build tools

// Package tools pins the Kubernetes components the test harness runs, so
// they are built from the same module graph at a fixed version.
// kube-apiserver and kube-controller-manager run in every harness cluster;
// kubelet, kube-scheduler and kube-proxy run on the harness's real nodes
// (test/lib/harness RealNodes), and kube-proxy is also the baseline the proxier
// is measured against (make bench-proxier). kubectl is what tests run the
// operator's commands with on a machine that has none. kubeadm, kubelet and
// kubectl also go into the kind node image the kind tests build.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubeadm"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
