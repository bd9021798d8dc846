package realnode

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

// leaseDuration is the controller's leader-election lease: mcsd's default
// --leader-elect-lease-duration, which manifests/mcsd does not change.
const leaseDuration = 15 * time.Second

// Leader failover: the controller pod holding cluster1's leader-election
// Lease (mcsd-controllers: its exporter and importer) is deleted as an
// operator or a drain would. The other replica of the Deployment takes the
// Lease, and a service cluster2 exports right after is imported into
// cluster1; the test reports how long each took, against the lease
// duration.
func testLeaderFailover(t *testing.T) {
	w := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	const ns, name = "failover", "late"
	importing, exporting := w.members[0], w.members[1]
	w.namespace(t, ns)
	w.backends(ctx, t, exporting, ns, name)
	w.services(ctx, t, exporting, ns, name, []string{name})

	pod, acquired, err := leader(ctx, importing)
	if err != nil {
		t.Fatalf("%s: no leader: %v", importing.Name, err)
	}
	p, err := importing.Kube.CoreV1().Pods(mcsdNamespace).Get(ctx, pod, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("%s: the leader %s is not a pod of the controller: %v", importing.Name, pod, err)
	}
	if p.Labels["app.kubernetes.io/component"] != "controller" {
		t.Fatalf("%s: the leader %s is not a pod of the controller: labels %v", importing.Name, pod, p.Labels)
	}
	node := p.Spec.NodeName
	began := time.Now()
	if err := importing.Kube.CoreV1().Pods(mcsdNamespace).Delete(ctx, pod, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	var newPod string
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		n, at, err := leader(ctx, importing)
		if err != nil || !at.After(acquired) {
			return false, nil
		}
		newPod = n
		return true, nil
	})
	if err != nil {
		t.Fatalf("%s: nobody took the Lease after the leader's pod %s on %s was deleted: %v", importing.Name, pod, node, err)
	}
	if newPod == pod {
		t.Fatalf("%s: the deleted pod %s holds the Lease again", importing.Name, pod)
	}
	tookOver := time.Since(began)
	exported := w.export(ctx, t, exporting, ns, name)[name]
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		si, err := importing.MCS.MulticlusterV1beta1().ServiceImports(ns).Get(ctx, name, metav1.GetOptions{})
		return err == nil && len(si.Spec.IPs) > 0, nil
	})
	if err != nil {
		t.Fatalf("%s never imported %s/%s under its new leader %s: %v", importing.Name, ns, name, newPod, err)
	}
	imported := time.Since(exported)
	t.Logf("figure: leader failover in %s: the leader's pod %s on %s deleted; the replica %s held the Lease %v later; a service exported then was imported in %v (lease duration %v)",
		importing.Name, pod, node, newPod, tookOver.Round(10*time.Millisecond), imported.Round(10*time.Millisecond), leaseDuration)
	w.awaitResolved(ctx, t, ns, name)
	if err := w.awaitRollout(ctx, importing, w.currentImage(ctx, t, importing)); err != nil {
		t.Fatal(err)
	}
}

// currentImage is the image the member's node agents run now.
func (w *world) currentImage(ctx context.Context, t *testing.T, m *member) string {
	t.Helper()
	ds, err := m.Kube.AppsV1().DaemonSets(mcsdNamespace).Get(ctx, nodeAgentDaemonSet, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return ds.Spec.Template.Spec.Containers[0].Image
}
