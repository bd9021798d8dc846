package readiness

import (
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func daemonSet(generation, observed int64, status appsv1.DaemonSetStatus) *appsv1.DaemonSet {
	status.ObservedGeneration = observed
	return &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "mcsd-node-agent", Generation: generation}, Status: status}
}

func pullingPod(name string) corev1.Pod {
	return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{{
		Image: "registry.example/mcsd:v1",
		State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ImagePullBackOff", Message: "Back-off pulling image"}},
	}}}}
}

func TestDaemonSetRollout(t *testing.T) {
	for _, tc := range []struct {
		name string
		ds   *appsv1.DaemonSet
		pods []corev1.Pod
		done bool
		// seen must be in what it saw; count is said when done.
		seen, count string
	}{
		{"a spec the controller has not seen", daemonSet(2, 1, appsv1.DaemonSetStatus{DesiredNumberScheduled: 2, UpdatedNumberScheduled: 2, NumberAvailable: 2}), nil, false, "generation 2", ""},
		{"pods not updated", daemonSet(2, 2, appsv1.DaemonSetStatus{DesiredNumberScheduled: 2, UpdatedNumberScheduled: 1, NumberAvailable: 2}), nil, false, "1 of 2 pods updated", ""},
		{"an image the nodes cannot pull", daemonSet(1, 1, appsv1.DaemonSetStatus{DesiredNumberScheduled: 2, UpdatedNumberScheduled: 2, NumberAvailable: 0}), []corev1.Pod{pullingPod("a"), pullingPod("b")},
			false, "pod a: ImagePullBackOff (Back-off pulling image): can the nodes pull registry.example/mcsd:v1? (--image)", ""},
		{"updated pods not available", daemonSet(1, 1, appsv1.DaemonSetStatus{DesiredNumberScheduled: 2, UpdatedNumberScheduled: 2, NumberAvailable: 1}), nil, false, "1 of 2 updated pods available", ""},
		{"no node to run on", daemonSet(1, 1, appsv1.DaemonSetStatus{}), nil, false, "no node", ""},
		{"rolled out", daemonSet(3, 3, appsv1.DaemonSetStatus{DesiredNumberScheduled: 2, UpdatedNumberScheduled: 2, NumberAvailable: 2}), nil, true, "", "2/2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := DaemonSetRollout(tc.ds, tc.pods)
			if o.Done != tc.done || !strings.Contains(o.Seen, tc.seen) || (tc.done && o.Count != tc.count) {
				t.Fatalf("%+v, want done %v, seen %q, count %q", o, tc.done, tc.seen, tc.count)
			}
		})
	}
}

func TestDeploymentRollout(t *testing.T) {
	deploy := func(generation int64, status appsv1.DeploymentStatus) *appsv1.Deployment {
		return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "mcsd-system", Name: "mcsd-controller", Generation: generation},
			Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](2)}, Status: status}
	}
	for _, tc := range []struct {
		name   string
		d      *appsv1.Deployment
		done   bool
		seen   string
		failed string
	}{
		{"a spec the controller has not seen", deploy(2, appsv1.DeploymentStatus{ObservedGeneration: 1, Replicas: 2, UpdatedReplicas: 2, AvailableReplicas: 2}), false, "generation 2", ""},
		{"replicas not updated", deploy(1, appsv1.DeploymentStatus{ObservedGeneration: 1, Replicas: 2, UpdatedReplicas: 1, AvailableReplicas: 2}), false, "1 of 2 replicas updated", ""},
		{"old replicas left", deploy(1, appsv1.DeploymentStatus{ObservedGeneration: 1, Replicas: 3, UpdatedReplicas: 2, AvailableReplicas: 2}), false, "1 old replicas", ""},
		{"updated replicas not available", deploy(1, appsv1.DeploymentStatus{ObservedGeneration: 1, Replicas: 2, UpdatedReplicas: 2, AvailableReplicas: 1}), false, "1 of 2 updated replicas available", ""},
		{"past its progress deadline", deploy(1, appsv1.DeploymentStatus{ObservedGeneration: 1, Replicas: 2, UpdatedReplicas: 1, Conditions: []appsv1.DeploymentCondition{{
			Type: appsv1.DeploymentProgressing, Status: corev1.ConditionFalse, Reason: "ProgressDeadlineExceeded", Message: "ReplicaSet mcsd-controller-1 has timed out progressing."}}}), false, "", "progress deadline"},
		{"rolled out", deploy(1, appsv1.DeploymentStatus{ObservedGeneration: 1, Replicas: 2, UpdatedReplicas: 2, AvailableReplicas: 2}), true, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, err := DeploymentRollout(tc.d, nil)
			if tc.failed != "" {
				if err == nil || !strings.Contains(err.Error(), tc.failed) {
					t.Fatalf("DeploymentRollout: %v, want an error saying %q", err, tc.failed)
				}
				return
			}
			if err != nil || o.Done != tc.done || !strings.Contains(o.Seen, tc.seen) || (tc.done && o.Count != "2/2") {
				t.Fatalf("%+v, %v; want done %v, seen %q", o, err, tc.done, tc.seen)
			}
		})
	}
}

func TestPodTroubleNamesAFewPods(t *testing.T) {
	unschedulable := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "u"}, Status: corev1.PodStatus{Conditions: []corev1.PodCondition{{
		Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: "Unschedulable", Message: "0/2 nodes are available"}}}}
	creating := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "c"}, Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{{
		State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}}}}}
	got := podTrouble([]corev1.Pod{unschedulable, creating, pullingPod("a"), pullingPod("b"), pullingPod("d")})
	if !strings.HasPrefix(got, "; pod u: Unschedulable: 0/2 nodes are available; pod a: ImagePullBackOff") || !strings.HasSuffix(got, "; 1 more") || strings.Contains(got, "pod c") {
		t.Errorf("podTrouble: %q", got)
	}
}
