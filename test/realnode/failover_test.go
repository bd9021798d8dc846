package realnode

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

// leaseDuration is the DaemonSet's leader-election lease: mcsd's default
// --leader-elect-lease-duration, which manifests/mcsd does not change.
const leaseDuration = 15 * time.Second

// Leader failover: the pod holding cluster1's leader-election Lease
// (mcsd-controllers: its exporter and importer) is deleted as an operator
// or a drain would; right after, cluster2 exports a new service. Another
// pod takes the Lease and cluster1 imports the service; the test reports
// how long each took, against the lease duration.
func TestLeaderFailover(t *testing.T) {
	w := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	const ns, name = "failover", "late"
	importing, exporting := w.members[0], w.members[1]
	w.namespace(t, ns)
	w.backends(ctx, t, exporting, ns, name)
	w.services(ctx, t, exporting, ns, name, []string{name})

	node, identity, err := leaderNode(ctx, importing)
	if err != nil {
		t.Fatalf("%s: no leader: %v", importing.Name, err)
	}
	pods, err := importing.Kube.CoreV1().Pods(mcsdNamespace).List(ctx, metav1.ListOptions{LabelSelector: mcsdSelector, FieldSelector: "spec.nodeName=" + node})
	if err != nil || len(pods.Items) != 1 {
		t.Fatalf("%s: the mcsd pod of leader %s: %v (%d pods)", importing.Name, identity, err, len(pods.Items))
	}
	leader := pods.Items[0].Name
	began := time.Now()
	if err := importing.Kube.CoreV1().Pods(mcsdNamespace).Delete(ctx, leader, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	w.export(ctx, t, exporting, ns, name)
	exported := time.Now()

	var newLeader string
	var tookOver time.Duration
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		if tookOver == 0 {
			if _, id, err := leaderNode(ctx, importing); err == nil && id != identity {
				newLeader, tookOver = id, time.Since(began)
			}
		}
		si, err := importing.MCS.MulticlusterV1beta1().ServiceImports(ns).Get(ctx, name, metav1.GetOptions{})
		return err == nil && len(si.Spec.IPs) > 0, nil
	})
	if err != nil {
		t.Fatalf("%s never imported %s/%s after its leader %s was deleted: %v", importing.Name, ns, name, identity, err)
	}
	imported := time.Since(exported)
	t.Logf("figure: leader failover in %s: pod %s (%s) deleted; %s held the Lease after %v; the export made right after was imported in %v (lease duration %v)",
		importing.Name, leader, identity, newLeader, tookOver.Round(10*time.Millisecond), imported.Round(10*time.Millisecond), leaseDuration)
	if imported > leaseDuration {
		t.Logf("the import took longer than the lease duration")
	}
	w.awaitResolved(ctx, t, ns, name)
	if err := w.awaitRollout(ctx, importing, w.currentImage(ctx, t, importing)); err != nil {
		t.Fatal(err)
	}
}

// currentImage is the image the member's DaemonSet runs now.
func (w *world) currentImage(ctx context.Context, t *testing.T, m *member) string {
	t.Helper()
	ds, err := m.Kube.AppsV1().DaemonSets(mcsdNamespace).Get(ctx, mcsdDaemonSet, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return ds.Spec.Template.Spec.Containers[0].Image
}
