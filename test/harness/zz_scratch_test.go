package harness_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/mcsd-io/mcsd/test/harness"
)

func TestScratchRealNodes(t *testing.T) {
	cs := harness.Start(t, harness.Options{Clusters: 1, RealNodes: true, Nodes: 2})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c := cs.Members[0]
	for i, n := range cs.RealNodes() {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p" + string(rune('a'+i)), Namespace: "default"},
			Spec: corev1.PodSpec{NodeName: n.Name, Containers: []corev1.Container{{Name: "c", Image: "localhost/pause:exp", Command: []string{"/pause"}}}}}
		if _, err := c.Kube.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	err := wait.PollUntilContextTimeout(ctx, time.Second, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		l, _ := c.Kube.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
		ok := 0
		for _, p := range l.Items {
			t.Logf("%s %s %s %v", p.Name, p.Status.Phase, p.Status.PodIP, p.Status.ContainerStatuses)
			if p.Status.Phase == corev1.PodRunning {
				ok++
			}
		}
		return ok == 2, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	data, err := c.Kube.CoreV1().Pods("default").GetLogs("pa", &corev1.PodLogOptions{}).DoRaw(ctx)
	t.Logf("logs: %q %v", data, err)
	eps, err := c.Kube.DiscoveryV1().EndpointSlices("default").List(ctx, metav1.ListOptions{})
	for _, e := range eps.Items {
		t.Logf("slice %s %v %v", e.Name, e.Endpoints, e.Ports)
	}
}
