package realnode

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/yaml"

	"github.com/mcsd-io/mcsd/charts"
	joininstall "github.com/mcsd-io/mcsd/kubectlmcs/install"
)

// The Helm path, in a namespace of the user's choosing: a member whose mcsd
// is installed by Helm in namespace mcs, and kubectl mcs join
// --install=false --namespace mcs, started before the release exists. Join
// writes the broker Secret in mcs, waits for mcsd-dns there, points CoreDNS
// at it and returns once mcsd has rolled out and every CoreDNS pod answers;
// verify then passes with that member's mcsd in mcs. The release is the
// chart rendered with Helm's own engine (package charts, what helm install
// renders) with the README's values, applied after the README's namespace
// and label. cluster2 leaves first, taking its mcsd of mcsd-system with it;
// afterwards it leaves again (--namespace mcs), the release goes, and it
// joins back as the README says.
func testJoinWithoutInstall(t *testing.T) {
	w := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	m := w.members[1]
	const ns = "mcs"
	if _, err := w.kubectl(ctx, "", "mcs", "leave", "--broker-context", w.cs.Broker.Name, "--context", m.Name); err != nil {
		t.Fatal(err)
	}
	awaitGone(ctx, t, m.Name+" namespace "+mcsdNamespace, func(ctx context.Context) error {
		_, err := m.Kube.CoreV1().Namespaces().Get(ctx, mcsdNamespace, metav1.GetOptions{})
		return err
	})

	// The README's Helm path: the namespace and its label first.
	if _, err := w.kubectl(ctx, "", "--context", m.Name, "create", "namespace", ns); err != nil {
		t.Fatal(err)
	}
	if _, err := w.kubectl(ctx, "", "--context", m.Name, "label", "namespace", ns, "--overwrite",
		"pod-security.kubernetes.io/enforce=privileged", "pod-security.kubernetes.io/enforce-version=latest"); err != nil {
		t.Fatal(err)
	}
	type joined struct {
		out  string
		err  error
		took time.Duration
	}
	done := make(chan joined, 1)
	watch := watchClusterDNS(ctx, m)
	began := time.Now()
	go func() {
		out, err := w.kubectl(ctx, "", "mcs", "join", "--broker-context", w.cs.Broker.Name, "--context", m.Name, "--namespace", ns,
			"--install=false", "--pod-cidrs", m.PodCIDR.String(), "--broker-server", w.cs.Broker.GatewayServer())
		done <- joined{out, err, time.Since(began)}
	}()
	// join writes the Secret before it waits for mcsd-dns.
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := m.Kube.CoreV1().Secrets(ns).Get(ctx, "mcsd-broker", metav1.GetOptions{})
		return err == nil, nil
	})
	if err != nil {
		j := <-done
		t.Fatalf("join wrote no Secret %s/mcsd-broker: %v\n%s%v", ns, err, j.out, j.err)
	}
	release := w.helmRelease(ctx, t, m, ns)

	j := <-done
	answered := watch.stop().Sub(began)
	if j.err != nil {
		t.Fatal(j.err)
	}
	t.Logf("%s: kubectl mcs join --install=false --namespace %s said:\n%s", m.Name, ns, j.out)
	t.Logf("figure: %s: kubectl mcs join --install=false, started before the release, returned %v after it began; every CoreDNS pod answered %v after it began",
		m.Name, j.took.Round(10*time.Millisecond), answered.Round(10*time.Millisecond))
	for _, want := range []string{"no Service " + ns + "/mcsd-dns yet", "Service " + ns + "/mcsd-dns found", "node agent rolled out 2/2", "controller rolled out 2/2", "CoreDNS answers for clusterset.local: 2/2 pods"} {
		if !strings.Contains(j.out, want) {
			t.Errorf("join did not say %q", want)
		}
	}
	if err := clusterDNSAnswers(ctx, m); err != nil {
		t.Fatalf("join returned, but not every CoreDNS pod answers: %v", err)
	}
	svc, err := m.Kube.CoreV1().Services(ns).Get(ctx, mcsdDNS, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm, err := m.Kube.CoreV1().ConfigMaps("kube-system").Get(ctx, "coredns", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(cm.Data["Corefile"], "forward . "+svc.Spec.ClusterIP) {
		t.Errorf("the Corefile does not forward to %s/%s (%s):\n%s", ns, mcsdDNS, svc.Spec.ClusterIP, cm.Data["Corefile"])
	}

	out, err := w.kubectl(ctx, "", "mcs", "verify", "--broker-context", w.cs.Broker.Name, "--image", w.mcsd[0].Ref)
	t.Logf("kubectl mcs verify with %s's mcsd in %s:\n%s", m.Name, ns, out)
	if err != nil {
		t.Fatal(err)
	}
	if pass := strings.Count(out, "PASS resolve "); pass != 2 {
		t.Errorf("%d checks passed, want 2", pass)
	}

	// Back as it was: leave (mcsd's namespace is mcs), the release goes,
	// and the README's join.
	out, err = w.kubectl(ctx, "", "mcs", "leave", "--broker-context", w.cs.Broker.Name, "--context", m.Name, "--namespace", ns)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "deleted Secret "+ns+"/mcsd-broker") || !strings.Contains(out, "nothing join installed is left") {
		t.Errorf("leave --namespace %s did not delete its Secret, or deleted the release's objects:\n%s", ns, out)
	}
	if _, err := w.kubectl(ctx, "", "--context", m.Name, "delete", "-f", release, "--wait"); err != nil {
		t.Fatal(err)
	}
	if _, err := w.kubectl(ctx, "", "--context", m.Name, "delete", "namespace", ns, "--wait"); err != nil {
		t.Fatal(err)
	}
	if err := w.installMCSD(ctx, m, w.mcsd[0]); err != nil {
		t.Fatal(err)
	}
}

// helmRelease installs mcsd in namespace ns of m as the README's helm
// install does, with its values (the image, the pod CIDRs): the chart
// rendered by Helm's engine, applied server-side. It returns the file of
// the release's objects.
func (w *world) helmRelease(ctx context.Context, t *testing.T, m *member, ns string) string {
	t.Helper()
	repository, tag := joininstall.SplitImage(w.mcsd[0].Ref)
	objs, err := charts.Objects(ns, map[string]any{
		"image":    map[string]any{"repository": repository, "tag": tag},
		"podCIDRs": []any{m.PodCIDR.String()},
	})
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, o := range objs {
		data, err := yaml.Marshal(o.Object)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "---\n%s", data)
	}
	file := filepath.Join(w.dir, m.Name+"-release-"+ns+".yaml")
	if err := os.WriteFile(file, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := w.kubectl(ctx, "", "--context", m.Name, "apply", "--server-side", "-f", file); err != nil {
		t.Fatal(err)
	}
	return file
}
