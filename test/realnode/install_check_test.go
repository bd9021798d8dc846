package realnode

import (
	"context"
	"regexp"
	"testing"
	"time"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The install as the README has it: the node agents' DaemonSet runs the
// overridden image on every node and the controller's Deployment in two
// replicas, each pod Ready with the shipped probes, the controller's on no
// host network and as no root; neither identity was refused anything; pods resolve cluster.local names through the
// kubelet's clusterDNS (CoreDNS), and clusterset.local names through the
// shipped snippet (an unknown one is NXDOMAIN from mcsd, not an error).
func testInstall(t *testing.T) {
	w := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	forbidden := regexp.MustCompile(`(?i)forbidden|cannot (get|list|watch|create|update|delete) resource|denied request`)
	for _, m := range w.members {
		pods, err := m.Kube.CoreV1().Pods(mcsdNamespace).List(ctx, metav1.ListOptions{LabelSelector: mcsdSelector})
		if err != nil {
			t.Fatal(err)
		}
		nodes := map[string]bool{}
		controllers := 0
		for _, p := range pods.Items {
			if p.Labels["app.kubernetes.io/component"] == "controller" {
				controllers++
				if p.Spec.HostNetwork || p.Spec.SecurityContext == nil || p.Spec.SecurityContext.RunAsNonRoot == nil || !*p.Spec.SecurityContext.RunAsNonRoot {
					t.Errorf("%s: controller pod %s runs on the host network or may run as root", m.Name, p.Name)
				}
			} else {
				nodes[p.Spec.NodeName] = true
			}
			if got := p.Spec.Containers[0].Image; got != w.mcsd[0].Ref {
				t.Errorf("%s: pod %s runs %s, want join's --image %s", m.Name, p.Name, got, w.mcsd[0].Ref)
			}
			logs, err := m.Kube.CoreV1().Pods(mcsdNamespace).GetLogs(p.Name, &corev1.PodLogOptions{}).DoRaw(ctx)
			if err != nil {
				t.Fatalf("%s: logs of %s: %v", m.Name, p.Name, err)
			}
			if loc := forbidden.FindIndex(logs); loc != nil {
				t.Errorf("%s: mcsd pod %s was refused something:\n%s", m.Name, p.Name, logs[max(loc[0]-300, 0):min(loc[1]+300, len(logs))])
			}
		}
		if len(nodes) != len(m.RealNodes()) {
			t.Errorf("%s: node agents on %v, want one on each of %d nodes", m.Name, nodes, len(m.RealNodes()))
		}
		if controllers != controllerReplicas {
			t.Errorf("%s: %d controller pods, want %d", m.Name, controllers, controllerReplicas)
		}
		// Each node agent wrote its node's report, which the admission
		// policy lets it write only with its pod's token.
		for _, n := range m.RealNodes() {
			if _, err := m.Kube.CoordinationV1().Leases(mcsdNamespace).Get(ctx, "mcsd-node-"+n.Name, metav1.GetOptions{}); err != nil {
				t.Errorf("%s: no report of node %s: %v", m.Name, n.Name, err)
			}
		}
		for _, c := range m.clients {
			for _, network := range []string{"udp", "tcp"} {
				r, err := c.Query(network, "kubernetes.default.svc.cluster.local", dns.TypeA)
				if err != nil || r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 {
					t.Errorf("%s: %s asked its nameserver %s over %s for kubernetes.default: %v %v", m.Name, c, c.Nameserver, network, r, err)
				}
				r, err = c.Query(network, "nothing.nowhere.svc.clusterset.local", dns.TypeA)
				if err != nil || r.Rcode != dns.RcodeNameError {
					t.Errorf("%s: %s asked for an unknown clusterset name over %s: %v %v, want NXDOMAIN", m.Name, c, network, r, err)
				}
			}
		}
	}
}
