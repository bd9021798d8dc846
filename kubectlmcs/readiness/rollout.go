package readiness

import (
	"context"
	"fmt"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// DaemonSetRollout judges a DaemonSet's rollout as kubectl rollout status
// does: the controller has seen its spec, every node that should run it
// runs the updated pod, and each is available. pods, those of its
// selector, say why it is not done.
func DaemonSetRollout(ds *appsv1.DaemonSet, pods []corev1.Pod) Observation {
	s := ds.Status
	want := s.DesiredNumberScheduled
	o := Observation{Count: fmt.Sprintf("%d/%d", s.NumberAvailable, want)}
	switch {
	case ds.Generation > s.ObservedGeneration:
		o.Seen = fmt.Sprintf("the DaemonSet controller has not seen generation %d yet", ds.Generation)
	case want == 0:
		o.Seen = "no node is to run it (node selector, taints?)"
	case s.UpdatedNumberScheduled < want:
		o.Seen = fmt.Sprintf("%d of %d pods updated", s.UpdatedNumberScheduled, want)
	case s.NumberAvailable < want:
		o.Seen = fmt.Sprintf("%d of %d updated pods available", s.NumberAvailable, want)
	default:
		o.Done = true
	}
	return withPodTrouble(o, pods)
}

// DeploymentRollout judges a Deployment's rollout as kubectl rollout
// status does: the controller has seen its spec, every replica is updated,
// no old one is left, and each updated one is available. A rollout past
// its progress deadline is an error: waiting longer will not finish it.
func DeploymentRollout(d *appsv1.Deployment, pods []corev1.Pod) (Observation, error) {
	s := d.Status
	want := int32(1)
	if d.Spec.Replicas != nil {
		want = *d.Spec.Replicas
	}
	o := Observation{Count: fmt.Sprintf("%d/%d", s.AvailableReplicas, want)}
	if d.Generation <= s.ObservedGeneration {
		for _, c := range s.Conditions {
			if c.Type == appsv1.DeploymentProgressing && c.Reason == "ProgressDeadlineExceeded" {
				return o, fmt.Errorf("Deployment %s/%s exceeded its progress deadline: %s%s", d.Namespace, d.Name, c.Message, podTrouble(pods))
			}
		}
	}
	switch {
	case d.Generation > s.ObservedGeneration:
		o.Seen = fmt.Sprintf("the Deployment controller has not seen generation %d yet", d.Generation)
	case s.UpdatedReplicas < want:
		o.Seen = fmt.Sprintf("%d of %d replicas updated", s.UpdatedReplicas, want)
	case s.Replicas > s.UpdatedReplicas:
		o.Seen = fmt.Sprintf("%d old replicas not terminated yet", s.Replicas-s.UpdatedReplicas)
	case s.AvailableReplicas < s.UpdatedReplicas:
		o.Seen = fmt.Sprintf("%d of %d updated replicas available", s.AvailableReplicas, s.UpdatedReplicas)
	default:
		o.Done = true
	}
	return withPodTrouble(o, pods), nil
}

func withPodTrouble(o Observation, pods []corev1.Pod) Observation {
	if !o.Done {
		o.Seen += podTrouble(pods)
	}
	return o
}

// podTrouble says why pods do not run, the way kubectl get pods would
// show it (ImagePullBackOff, CrashLoopBackOff, Unschedulable), for the
// first few of them; "" when none is in trouble.
func podTrouble(pods []corev1.Pod) string {
	const most = 3
	var out []string
	for _, p := range pods {
		if why := podProblem(&p); why != "" && p.DeletionTimestamp == nil {
			out = append(out, "pod "+p.Name+": "+why)
		}
	}
	if len(out) == 0 {
		return ""
	}
	if len(out) > most {
		out = append(out[:most], fmt.Sprintf("%d more", len(out)-most))
	}
	return "; " + strings.Join(out, "; ")
}

func podProblem(p *corev1.Pod) string {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse {
			return c.Reason + ": " + c.Message
		}
	}
	for _, cs := range append(p.Status.InitContainerStatuses, p.Status.ContainerStatuses...) {
		if w := cs.State.Waiting; w != nil && w.Reason != "" && w.Reason != "ContainerCreating" && w.Reason != "PodInitializing" {
			why := w.Reason
			if w.Message != "" {
				why += " (" + w.Message + ")"
			}
			if w.Reason == "ErrImagePull" || w.Reason == "ImagePullBackOff" || w.Reason == "InvalidImageName" {
				why += ": can the nodes pull " + cs.Image + "? (--image)"
			}
			return why
		}
	}
	return ""
}

// DaemonSet is the check of the rollout of DaemonSet namespace/name.
func DaemonSet(kube kubernetes.Interface, namespace, name string) func(context.Context) (Observation, error) {
	return func(ctx context.Context) (Observation, error) {
		ds, err := kube.AppsV1().DaemonSets(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return Observation{Seen: fmt.Sprintf("reading DaemonSet %s/%s: %v", namespace, name, err)}, nil
		}
		return DaemonSetRollout(ds, selectedPods(ctx, kube, namespace, ds.Spec.Selector)), nil
	}
}

// Deployment is the check of the rollout of Deployment namespace/name.
func Deployment(kube kubernetes.Interface, namespace, name string) func(context.Context) (Observation, error) {
	return func(ctx context.Context) (Observation, error) {
		d, err := kube.AppsV1().Deployments(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return Observation{Seen: fmt.Sprintf("reading Deployment %s/%s: %v", namespace, name, err)}, nil
		}
		return DeploymentRollout(d, selectedPods(ctx, kube, namespace, d.Spec.Selector))
	}
}

// selectedPods are the pods of a workload's selector; none when they
// cannot be listed (they only say why a rollout is not done).
func selectedPods(ctx context.Context, kube kubernetes.Interface, namespace string, selector *metav1.LabelSelector) []corev1.Pod {
	sel, err := metav1.LabelSelectorAsSelector(selector)
	if err != nil {
		return nil
	}
	pods, err := kube.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
	if err != nil {
		return nil
	}
	return pods.Items
}
