package diagnose

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
)

// The probe pods' life: their spec (restricted, short-lived, labelled),
// creating them, waiting for them, reading their logs and removing them.

// probePod is a restricted pod of mcsd's image running args.
func probePod(m *reachMember, role string, args []string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName: "mcsd-diagnose-" + role + "-",
			Namespace:    mcsdNamespace,
			Labels:       map[string]string{ProbeLabel: probeLabelValue},
		},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			ActiveDeadlineSeconds:         ptr.To(int64(ProbeDeadline.Seconds())),
			TerminationGracePeriodSeconds: ptr.To[int64](1),
			AutomountServiceAccountToken:  ptr.To(false),
			EnableServiceLinks:            ptr.To(false),
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot:   ptr.To(true),
				RunAsUser:      ptr.To[int64](probeUser),
				RunAsGroup:     ptr.To[int64](probeUser),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			Containers: []corev1.Container{{
				Name:  "probe",
				Image: m.image,
				// The image is on every node mcsd's DaemonSet runs on.
				ImagePullPolicy: corev1.PullIfNotPresent,
				Args:            args,
				Env:             []corev1.EnvVar{{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}},
				Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("16Mi")},
					Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")},
				},
				SecurityContext: &corev1.SecurityContext{
					AllowPrivilegeEscalation: ptr.To(false),
					ReadOnlyRootFilesystem:   ptr.To(true),
					Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
				},
			}},
		},
	}
}

func (m *reachMember) create(ctx context.Context, pod *corev1.Pod) (*corev1.Pod, error) {
	created, err := m.kube.CoreV1().Pods(mcsdNamespace).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("%s: creating a probe pod in %s: %w", m.name, mcsdNamespace, err)
	}
	return created, nil
}

// await polls pod until done says it is as wanted, and returns it as last
// read. A finished pod may have lost its IP from its status: the one seen
// before is kept.
func (m *reachMember) await(ctx context.Context, pod *corev1.Pod, timeout time.Duration, done func(*corev1.Pod) bool) (*corev1.Pod, error) {
	last := pod
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		p, err := m.kube.CoreV1().Pods(mcsdNamespace).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		if p.Status.PodIP == "" {
			p.Status.PodIP = last.Status.PodIP
		}
		last = p
		return done(p), nil
	})
	if err != nil {
		return last, fmt.Errorf("%s: probe pod %s/%s not done within %v: %s", m.name, mcsdNamespace, pod.Name, timeout, podWhy(last))
	}
	return last, nil
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

// podWhy says where a pod is, for errors: its phase, why it is not
// scheduled, why its container waits or ended.
func podWhy(p *corev1.Pod) string {
	s := []string{"phase " + string(p.Status.Phase)}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status != corev1.ConditionTrue {
			s = append(s, "not scheduled: "+c.Message)
		}
	}
	for _, c := range p.Status.ContainerStatuses {
		if w := c.State.Waiting; w != nil {
			s = append(s, w.Reason+": "+w.Message)
		}
		if t := c.State.Terminated; t != nil {
			s = append(s, fmt.Sprintf("exited %d (%s)", t.ExitCode, t.Reason))
		}
	}
	return strings.Join(s, ", ")
}

// readLog parses the log of m's pod.
func readLog[T any](ctx context.Context, m *reachMember, pod *corev1.Pod, parse func(io.Reader) (T, error)) (T, error) {
	var zero T
	logs, err := m.kube.CoreV1().Pods(mcsdNamespace).GetLogs(pod.Name, &corev1.PodLogOptions{}).Stream(ctx)
	if err != nil {
		return zero, fmt.Errorf("%s: reading the log of probe pod %s/%s: %w", m.name, mcsdNamespace, pod.Name, err)
	}
	defer logs.Close()
	return parse(logs)
}

// removeProbes deletes the members' probe pods and waits until they are
// gone.
func removeProbes(ctx context.Context, members []*reachMember) error {
	return each(members, func(m *reachMember) error {
		pods := m.kube.CoreV1().Pods(mcsdNamespace)
		var names []string
		var errs []error
		for _, p := range []*corev1.Pod{m.serve, m.check} {
			if p == nil {
				continue
			}
			if err := pods.Delete(ctx, p.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				errs = append(errs, fmt.Errorf("%s: deleting probe pod %s/%s: %w", m.name, mcsdNamespace, p.Name, err))
				continue
			}
			names = append(names, p.Name)
		}
		const patience = 30 * time.Second
		err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, patience, true, func(ctx context.Context) (bool, error) {
			for len(names) > 0 {
				if _, err := pods.Get(ctx, names[0], metav1.GetOptions{}); !apierrors.IsNotFound(err) {
					return false, nil
				}
				names = names[1:]
			}
			return true, nil
		})
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: probe pods %s still in %s after %v (kubectl -n %s delete pods -l %s)", m.name, strings.Join(names, ", "), mcsdNamespace, patience, mcsdNamespace, ProbeLabel))
		}
		return errors.Join(errs...)
	})
}

// each runs f for every member at once and joins the errors.
func each(members []*reachMember, f func(*reachMember) error) error {
	errs := make([]error, len(members))
	var wg sync.WaitGroup
	for i, m := range members {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = f(m)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}
