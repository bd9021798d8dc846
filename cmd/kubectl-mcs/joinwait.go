package main

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"

	"github.com/mcsd-io/mcsd/kubectlmcs/readiness"
)

// --restart-coredns.
const (
	restartAuto   = "auto"
	restartAlways = "always"
	restartNever  = "never"
)

// autoRestartAfter is how long --restart-coredns=auto lets the cluster DNS
// pods be, once mcsd has rolled out, before it restarts them. A pod reads
// a changed Corefile by itself only once the kubelet has updated its
// ConfigMap volume (at its next sync of the pod, up to a minute, plus its
// cache's TTL) and the reload plugin has seen the file change (every 30 s
// by default): a minute or two, measured at up to 84 s. A pod that has not
// in this long will take about that long still; a restarted one starts
// with the Corefile as it is.
const autoRestartAfter = 5 * time.Second

// The workloads of the chart, by the names it gives them.
const (
	nodeAgentDaemonSet   = "mcsd-node-agent"
	controllerDeployment = "mcsd-controller"
)

// waiter waits for what join set up, stage by stage, saying when each is
// reached.
type waiter struct {
	cfg       *rest.Config
	kube      kubernetes.Interface
	namespace string
	runner    readiness.Runner
}

func (o *joinOptions) waiter(g *globals, cfg *rest.Config, kube kubernetes.Interface, namespace string, began time.Time) *waiter {
	return &waiter{cfg: cfg, kube: kube, namespace: namespace, runner: readiness.Runner{
		Began: began, Interval: time.Second, Heartbeat: 30 * time.Second, Clock: clock.RealClock{},
		Report: func(line string) { fmt.Fprintf(g.streams.ErrOut, "join: %s\n", line) },
	}}
}

// dnsService waits until mcsd's DNS Service exists, when it does not yet:
// Helm or kustomize may be installing mcsd while join runs.
func (w *waiter) dnsService(ctx context.Context) error {
	if _, err := w.kube.CoreV1().Services(w.namespace).Get(ctx, mcsdDNSService, metav1.GetOptions{}); err == nil {
		return nil
	}
	w.runner.Report(fmt.Sprintf("no Service %s/%s yet: waiting for mcsd to be installed there (--namespace names where)", w.namespace, mcsdDNSService))
	return w.runner.Run(ctx, []readiness.Stage{{
		Name: "Service " + w.namespace + "/" + mcsdDNSService + " found:",
		Check: func(ctx context.Context) (readiness.Observation, error) {
			svc, err := w.kube.CoreV1().Services(w.namespace).Get(ctx, mcsdDNSService, metav1.GetOptions{})
			if err != nil {
				return readiness.Observation{Seen: err.Error()}, nil
			}
			return readiness.Observation{Done: svc.Spec.ClusterIP != "", Count: svc.Spec.ClusterIP, Seen: "no ClusterIP yet"}, nil
		},
	}})
}

// rollout waits until the node agents and the controller have rolled out.
func (w *waiter) rollout(ctx context.Context) error {
	return w.runner.Run(ctx, []readiness.Stage{
		{Name: "node agent rolled out", Check: readiness.DaemonSet(w.kube, w.namespace, nodeAgentDaemonSet)},
		{Name: "controller rolled out", Check: readiness.Deployment(w.kube, w.namespace, controllerDeployment)},
	})
}

// clusterDNS waits until every pod of the cluster DNS answers for
// clusterset.local, restarting CoreDNS as restart (--restart-coredns)
// says.
func (w *waiter) clusterDNS(ctx context.Context, restart string) error {
	dns, err := readiness.FindClusterDNS(ctx, w.cfg, w.kube)
	if err != nil {
		return err
	}
	answers := readiness.Stage{Name: "CoreDNS answers for clusterset.local:", Check: dns.Answers}
	switch restart {
	case restartAlways:
		what, err := dns.Restart(ctx, time.Now())
		if err != nil {
			return err
		}
		w.runner.Report(what + " (--restart-coredns=always)")
	case restartAuto:
		answers.Stall = &readiness.Stall{After: autoRestartAfter, Do: func(ctx context.Context) (string, error) {
			if !dns.Reached() {
				return "not restarting the cluster DNS: its pods could not be asked at all, which a restart would not change", nil
			}
			what, err := dns.Restart(ctx, time.Now())
			return fmt.Sprintf("the cluster DNS pods did not answer for clusterset.local %v after mcsd rolled out: %s (--restart-coredns=auto)", autoRestartAfter, what), err
		}}
	}
	return w.runner.Run(ctx, []readiness.Stage{answers})
}
