package realnode

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/mcsd-io/mcsd/kubectlmcs/diagnose"
)

// kubectl mcs diagnose --peer-contexts checks that pods of the two members
// reach each other's pod IPs. The harness routes every node's pod subnet
// from every other node, so both directions pass. With cluster1's routes to
// cluster2's pod subnets gone (blackholed: each node's default route leads
// to the fabric, which routes every pod subnet for the API servers, so a
// plain deletion would leave a way), both directions fail naming the same
// missing route: cluster1 has no route to cluster2's declared pod CIDR, the
// way there of cluster1's connections and the way back of cluster2's. Once
// the routes are back both pass again. The probe pods are restricted (the
// API server's PodSecurity "restricted" level admits them) and none is
// left afterwards.
func testDiagnoseReachability(t *testing.T) {
	w := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	east, west := w.members[0], w.members[1]
	probes := watchProbePods(ctx, t, east, west)
	there, back := fmt.Sprintf("pod reachability %s -> %s", east.id, west.id), fmt.Sprintf("pod reachability %s -> %s", west.id, east.id)

	t.Run("passes where the members' pod networks are routed", func(t *testing.T) {
		// What the other checks take, for the figure.
		w.diagnose(ctx, t, east, "--skip-reachability")
		checks, _ := w.diagnoseWithPeer(ctx, t, east, west)
		for _, c := range checks {
			if c.Result != diagnose.Pass {
				t.Errorf("%s %s: %s (fix: %s)", c.Result, c.Name, c.Detail, c.Fix)
			}
		}
		for _, name := range []string{there, back} {
			if c, ok := checks[name]; !ok || !strings.Contains(c.Detail, "connects to") {
				t.Errorf("%s: %+v", name, c)
			}
		}
	})

	t.Run("fails naming the route missing between the pod networks", func(t *testing.T) {
		blackholeRoutes(t, east, west)
		checks, failed := w.diagnoseWithPeer(ctx, t, east, west)
		if !failed {
			t.Error("diagnose did not exit 1")
		}
		cidr := fmt.Sprintf("%s's pod CIDR %s (declared by %s on the broker)", west.id, west.PodCIDR, west.id)
		fix := fmt.Sprintf("on %s's nodes (or the router of their network), route %s to the node of %s", east.id, west.PodCIDR, west.id)
		for name, want := range map[string]string{
			there: fmt.Sprintf("cluster %s: no route from pod ", east.id),
			back:  fmt.Sprintf("cluster %s: no route back from pod ", east.id),
		} {
			c := checks[name]
			if c.Result != diagnose.Fail || !strings.Contains(c.Detail, want) || !strings.Contains(c.Detail, cidr) {
				t.Errorf("%s: %s %s, want FAIL %q ... %q", name, c.Result, c.Detail, want, cidr)
			}
			if !strings.Contains(c.Fix, fix) || !strings.Contains(c.Fix, "docs/install/flat-network.md") {
				t.Errorf("%s: fix %q, want %q and the docs page", name, c.Fix, fix)
			}
		}
		for _, c := range checks {
			if c.Result != diagnose.Pass && c.Name != there && c.Name != back {
				t.Errorf("%s %s: %s, want only the reachability checks to fail", c.Result, c.Name, c.Detail)
			}
		}
		t.Logf("%s: %s\n    fix: %s", there, checks[there].Detail, checks[there].Fix)
		t.Logf("%s: %s", back, checks[back].Detail)
	})

	t.Run("passes again once the routes are back", func(t *testing.T) {
		checks, failed := w.diagnoseWithPeer(ctx, t, east, west)
		if failed || checks[there].Result != diagnose.Pass || checks[back].Result != diagnose.Pass {
			t.Errorf("%s: %+v; %s: %+v", there, checks[there], back, checks[back])
		}
	})

	for _, m := range []*member{east, west} {
		left, err := m.Kube.CoreV1().Pods(mcsdNamespace).List(ctx, metav1.ListOptions{LabelSelector: diagnose.ProbeLabel})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range left.Items {
			t.Errorf("%s: probe pod %s left behind", m.Name, p.Name)
		}
	}
	probes.restricted(ctx, t, east)
}

// diagnoseWithPeer runs kubectl mcs diagnose of m with peer.
func (w *world) diagnoseWithPeer(ctx context.Context, t *testing.T, m, peer *member) (map[string]diagnose.Check, bool) {
	t.Helper()
	return w.diagnose(ctx, t, m, "--peer-contexts", peer.Name)
}

// diagnose runs kubectl mcs diagnose of m with flags, and returns its
// checks by name and whether it failed, logging how long it took.
func (w *world) diagnose(ctx context.Context, t *testing.T, m *member, flags ...string) (map[string]diagnose.Check, bool) {
	t.Helper()
	start := time.Now()
	out, err := w.kubectl(ctx, "", append([]string{"mcs", "diagnose", "--context", m.Name, "-o", "json"}, flags...)...)
	took := time.Since(start)
	i := strings.Index(out, "[")
	if i < 0 {
		t.Fatalf("diagnose printed no checks: %v\n%s", err, out)
	}
	var list []diagnose.Check
	if jerr := json.NewDecoder(strings.NewReader(out[i:])).Decode(&list); jerr != nil {
		t.Fatalf("diagnose printed no checks: %v, %v\n%s", err, jerr, out)
	}
	checks := map[string]diagnose.Check{}
	for _, c := range list {
		checks[c.Name] = c
	}
	t.Logf("figure: kubectl mcs diagnose --context %s %s: %d checks in %v", m.Name, strings.Join(flags, " "), len(list), took.Round(100*time.Millisecond))
	return checks, err != nil
}

// blackholeRoutes drops, on every node of from, what it sends to the pod
// subnets of to's nodes, until the test ends.
func blackholeRoutes(t *testing.T, from, to *member) {
	t.Helper()
	for _, n := range from.RealNodes() {
		for _, o := range to.RealNodes() {
			subnet, via := o.PodSubnet.String(), o.IP.String()
			t.Cleanup(func() {
				if _, err := n.NS.IP("route", "replace", subnet, "via", via); err != nil {
					t.Errorf("%s: restoring the route to %s via %s: %v", n.Name, subnet, via, err)
				}
			})
			if _, err := n.NS.IP("route", "replace", "blackhole", subnet); err != nil {
				t.Fatalf("%s: %v", n.Name, err)
			}
		}
	}
}

// probePods are the probe pods diagnose created, as first seen.
type probePods struct {
	mu   sync.Mutex
	pods map[string]*corev1.Pod
	// errs are the watches' errors.
	errs []string
}

// watchProbePods records the probe pods created in the members until ctx
// ends.
func watchProbePods(ctx context.Context, t *testing.T, members ...*member) *probePods {
	t.Helper()
	p := &probePods{pods: map[string]*corev1.Pod{}}
	for _, m := range members {
		// From resource version "0", the watch cache's state: a watch from
		// the latest version gets "Too large resource version" here while
		// the cache has seen no pod change.
		wi, err := m.Kube.CoreV1().Pods(mcsdNamespace).Watch(ctx, metav1.ListOptions{LabelSelector: diagnose.ProbeLabel, ResourceVersion: "0"})
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			for ev := range wi.ResultChan() {
				p.mu.Lock()
				switch obj := ev.Object.(type) {
				case *corev1.Pod:
					if ev.Type == watch.Added {
						p.pods[m.Name+"/"+obj.Name] = obj
					}
				case *metav1.Status:
					p.errs = append(p.errs, m.Name+": "+obj.Message)
				}
				p.mu.Unlock()
			}
		}()
	}
	return p
}

// restricted checks that each pod seen is no more than the "restricted"
// Pod Security level allows, by a dry-run create of its spec in a
// namespace of m that enforces it, and is not on the host's network.
func (p *probePods) restricted(ctx context.Context, t *testing.T, m *member) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.pods) != 12 {
		t.Errorf("saw %d probe pods, want a serve and a check pod in each member for each of 3 runs (watch errors: %v)", len(p.pods), p.errs)
	}
	const ns = "diagnose-restricted"
	_, err := m.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name: ns, Labels: map[string]string{"pod-security.kubernetes.io/enforce": "restricted"},
	}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := m.Kube.CoreV1().Namespaces().Delete(context.WithoutCancel(ctx), ns, metav1.DeleteOptions{}); err != nil {
			t.Errorf("deleting namespace %s: %v", ns, err)
		}
	}()
	// Admission looks the pods' ServiceAccount up: the controller makes it.
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := m.Kube.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("no ServiceAccount %s/default: %v", ns, err)
	}
	for name, pod := range p.pods {
		if pod.Spec.HostNetwork {
			t.Errorf("probe pod %s is on the host's network", name)
		}
		dry := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: ns}, Spec: *pod.Spec.DeepCopy()}
		dry.Spec.NodeName = ""
		if _, err := m.Kube.CoreV1().Pods(ns).Create(ctx, dry, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
			t.Errorf("probe pod %s, in a namespace that enforces the restricted level: %v", name, err)
		}
	}
}
