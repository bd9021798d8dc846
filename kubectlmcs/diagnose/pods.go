package diagnose

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The node agents as manifests/mcsd ships them: their namespace, the label
// of their pods, and the container port of their health server (their
// /metrics listens on the node's loopback only).
const (
	mcsdNamespace = "mcsd-system"
	mcsdSelector  = "app.kubernetes.io/name=mcsd,app.kubernetes.io/component=node-agent"
	healthPort    = "health"
	// programmedCheck is the readiness check that passes once the
	// proxier has committed its rules to the node.
	programmedCheck = "proxier-programmed"
)

// fetchFunc GETs path from a pod's named port through the API server's pod
// proxy, as an operator without a route to pod addresses can.
type fetchFunc func(ctx context.Context, pod *corev1.Pod, port, path string) ([]byte, error)

func (r *run) proxyFetch(ctx context.Context, pod *corev1.Pod, port, path string) ([]byte, error) {
	number := port
	for _, c := range pod.Spec.Containers {
		for _, p := range c.Ports {
			if p.Name == port {
				number = strconv.Itoa(int(p.ContainerPort))
			}
		}
	}
	path, query, _ := strings.Cut(path, "?")
	params := map[string]string{}
	if query != "" {
		params[query] = ""
	}
	return r.kube.CoreV1().Pods(pod.Namespace).ProxyGet("http", pod.Name, number, path, params).DoRaw(ctx)
}

// pods checks every node agent of the cluster: ready, and its proxier has
// programmed the node (through its own /readyz, not by exec).
func (r *run) pods(ctx context.Context) {
	const name = "mcsd pods"
	pods, err := r.kube.CoreV1().Pods(mcsdNamespace).List(ctx, metav1.ListOptions{LabelSelector: mcsdSelector})
	if err != nil {
		r.add(name, Fail, "listing pods "+mcsdSelector+" in "+mcsdNamespace+": "+err.Error(), "run diagnose with rights to list and proxy pods in "+mcsdNamespace)
		return
	}
	if len(pods.Items) == 0 {
		r.skip(name, "no pod "+mcsdSelector+" in "+mcsdNamespace+": mcsd is not deployed from manifests/mcsd here")
		return
	}
	fetch := r.fetch
	if fetch == nil {
		fetch = r.proxyFetch
	}
	var bad []string
	for i := range pods.Items {
		if problem := podProblem(ctx, &pods.Items[i], fetch); problem != "" {
			bad = append(bad, pods.Items[i].Name+" on "+pods.Items[i].Spec.NodeName+": "+problem)
		}
	}
	if len(bad) > 0 {
		r.add(name, Fail, strings.Join(bad, "; "), "read the pod's log (kubectl -n "+mcsdNamespace+" logs POD) and its /readyz?verbose; a proxier that never synced needs nftables (kernel >= 5.13) or --proxier-mode=iptables")
		return
	}
	r.add(name, Pass, fmt.Sprintf("%d pods ready, each with its rules programmed", len(pods.Items)), "")
}

// podProblem says what is wrong with one mcsd pod, or "".
func podProblem(ctx context.Context, pod *corev1.Pod, fetch fetchFunc) string {
	if pod.Status.Phase != corev1.PodRunning {
		return "phase " + string(pod.Status.Phase)
	}
	ready := false
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
			ready = true
		}
	}
	body, err := fetch(ctx, pod, healthPort, "/readyz?verbose")
	if err != nil {
		if !ready {
			return "not ready, and its /readyz cannot be read: " + err.Error()
		}
		return "its /readyz cannot be read: " + err.Error()
	}
	var failing []string
	programmed := false
	for _, line := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(line, "[-]") {
			failing = append(failing, strings.TrimPrefix(line, "[-]"))
		}
		if strings.HasPrefix(line, "[+]"+programmedCheck+" ") {
			programmed = true
		}
	}
	if !ready {
		return "not ready: " + strings.Join(failing, ", ")
	}
	if !programmed {
		return "its proxier has not programmed the node (no passing " + programmedCheck + " check in its /readyz?verbose)"
	}
	return ""
}
