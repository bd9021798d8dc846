package diagnose

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The mcsd DaemonSet as manifests/mcsd ships it: its namespace, the label
// of its pods, and the container ports of its health and metrics servers.
const (
	mcsdNamespace = "mcsd-system"
	mcsdSelector  = "app.kubernetes.io/name=mcsd"
	healthPort    = "health"
	metricsPort   = "metrics"
	// syncedMetric is when the proxier last committed its rules: present
	// and non-zero once the node's table exists and holds mcsd's rules.
	syncedMetric = "mcsd_proxier_sync_proxy_rules_last_timestamp_seconds"
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

// pods checks every mcsd pod of the cluster: ready, and its proxier has
// programmed the node (through its own health and metrics, not by exec).
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
	if !ready {
		body, err := fetch(ctx, pod, healthPort, "/readyz?verbose")
		if err != nil {
			return "not ready, and its /readyz cannot be read: " + err.Error()
		}
		var failing []string
		for _, line := range strings.Split(string(body), "\n") {
			if strings.HasPrefix(line, "[-]") {
				failing = append(failing, strings.TrimPrefix(line, "[-]"))
			}
		}
		return "not ready: " + strings.Join(failing, ", ")
	}
	body, err := fetch(ctx, pod, metricsPort, "/metrics")
	if err != nil {
		return "its /metrics cannot be read: " + err.Error()
	}
	synced := false
	for _, line := range strings.Split(string(body), "\n") {
		if !strings.HasPrefix(line, syncedMetric+"{") {
			continue
		}
		fields := strings.Fields(line)
		if v, err := strconv.ParseFloat(fields[len(fields)-1], 64); err == nil && v > 0 {
			synced = true
		}
	}
	if !synced {
		return "its proxier has not programmed the node (" + syncedMetric + " is absent or 0)"
	}
	return ""
}
