package diagnose

import (
	"context"
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

func mcsdPod(name string, ready bool) *corev1.Pod {
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: mcsdNamespace, Name: name, Labels: map[string]string{"app.kubernetes.io/name": "mcsd", "app.kubernetes.io/component": "node-agent"}},
		Spec:       corev1.PodSpec{NodeName: "node-" + name},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: status}}},
	}
}

func TestPodsCheckReadinessAndProgrammedRules(t *testing.T) {
	synced := "[+]ping ok\n[+]" + programmedCheck + " ok\nreadyz check passed"
	for _, tc := range []struct {
		name   string
		pods   []*corev1.Pod
		pages  map[string]string // "pod port path" -> body; absent: an error
		result string
		detail string
	}{
		{name: "no mcsd pods", result: Skip},
		{name: "ready pods whose proxier synced", pods: []*corev1.Pod{mcsdPod("a", true), mcsdPod("b", true)},
			pages: map[string]string{"a health /readyz?verbose": synced, "b health /readyz?verbose": synced}, result: Pass, detail: "2 pods"},
		{name: "a pod not ready says which check fails", pods: []*corev1.Pod{mcsdPod("a", false)},
			pages:  map[string]string{"a health /readyz?verbose": "[+]ping ok\n[-]proxier-synced failed: reason withheld\nreadyz check failed"},
			result: Fail, detail: "proxier-synced"},
		{name: "a ready pod whose proxier never synced", pods: []*corev1.Pod{mcsdPod("a", true)},
			pages:  map[string]string{"a health /readyz?verbose": "[+]ping ok\nreadyz check passed"},
			result: Fail, detail: "has not programmed the node"},
		{name: "a pod whose readiness cannot be read", pods: []*corev1.Pod{mcsdPod("a", true)}, result: Fail, detail: "cannot be read"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kube := fake.NewClientset()
			for _, p := range tc.pods {
				if err := kube.Tracker().Add(p); err != nil {
					t.Fatal(err)
				}
			}
			r := &run{kube: kube, fetch: func(_ context.Context, pod *corev1.Pod, port, path string) ([]byte, error) {
				body, ok := tc.pages[pod.Name+" "+port+" "+path]
				if !ok {
					return nil, errors.New("connection refused")
				}
				return []byte(body), nil
			}}
			r.pods(context.Background())
			if len(r.checks) != 1 {
				t.Fatalf("checks %+v", r.checks)
			}
			c := r.checks[0]
			if c.Result != tc.result || !strings.Contains(c.Detail, tc.detail) {
				t.Fatalf("%s: %s, want %s mentioning %q", c.Result, c.Detail, tc.result, tc.detail)
			}
		})
	}
}
