// Package echopod runs the echo server (test/cmd/echo) as pods on a real
// cluster's kubelets, for the suites that run on real nodes and on kind:
// the pod spec, its creation in a namespace whose ServiceAccount may not
// exist yet, and a started pod as the conformance suite sees it.
package echopod

import (
	"context"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/mcsd-io/mcsd/test/lib/conformance"
	"github.com/mcsd-io/mcsd/test/lib/harness"
)

// DefaultPort is the port an echo pod answers on when a spec names none.
const DefaultPort int32 = 8080

// Spec is a pod of the echo image answering on ports with its identity
// (its address, cluster and name). It requests a little CPU, as a
// workload does: without a request a pod gets the smallest CPU weight, and
// a loaded node leaves its answers waiting for seconds.
func Spec(namespace, name, cluster, image string, labels map[string]string, ports ...int32) *corev1.Pod {
	if len(ports) == 0 {
		ports = []int32{DefaultPort}
	}
	var portList []string
	var containerPorts []corev1.ContainerPort
	for _, p := range ports {
		portList = append(portList, strconv.Itoa(int(p)))
		containerPorts = append(containerPorts,
			corev1.ContainerPort{Name: fmt.Sprintf("tcp-%d", p), ContainerPort: p, Protocol: corev1.ProtocolTCP},
			corev1.ContainerPort{Name: fmt.Sprintf("udp-%d", p), ContainerPort: p, Protocol: corev1.ProtocolUDP})
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: labels},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: ptr.To[int64](1),
			Containers: []corev1.Container{{
				Name:            "echo",
				Image:           image,
				ImagePullPolicy: corev1.PullIfNotPresent,
				Ports:           containerPorts,
				Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m")},
				},
				Env: []corev1.EnvVar{
					{Name: "POD_IPS", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIPs"}}},
					{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
					{Name: "CLUSTER", Value: cluster},
					{Name: "ECHO_PORTS", Value: strings.Join(portList, ",")},
				},
				ReadinessProbe: &corev1.Probe{
					ProbeHandler:  corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(ports[0])}},
					PeriodSeconds: 1,
				},
			}},
		},
	}
}

// Create creates a pod in cluster, waiting out the moment a new namespace
// has no default ServiceAccount yet.
func Create(ctx context.Context, kube kubernetes.Interface, cluster string, pod *corev1.Pod) (*corev1.Pod, error) {
	var created *corev1.Pod
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		var err error
		created, err = kube.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{})
		if apierrors.IsForbidden(err) && strings.Contains(err.Error(), "serviceaccount") {
			return false, nil
		}
		return err == nil, err
	})
	if err != nil {
		return nil, fmt.Errorf("%s: creating pod %s/%s: %w", cluster, pod.Namespace, pod.Name, err)
	}
	return created, nil
}

// Ready reports whether the pod's Ready condition is true.
func Ready(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// AwaitReady waits up to within until the pod is Ready and returns it.
func AwaitReady(ctx context.Context, kube kubernetes.Interface, cluster string, pod *corev1.Pod, within time.Duration) (*corev1.Pod, error) {
	var got *corev1.Pod
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, within, true, func(ctx context.Context) (bool, error) {
		var err error
		got, err = kube.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		return err == nil && Ready(got), nil
	})
	if err != nil {
		return nil, fmt.Errorf("%s: pod %s/%s not Ready: %w", cluster, pod.Namespace, pod.Name, err)
	}
	return got, nil
}

// Start runs the echo pod a conformance spec asks for in cluster and
// returns it once it is Ready.
func Start(ctx context.Context, kube kubernetes.Interface, cluster, image string, spec conformance.PodSpec) (conformance.Pod, error) {
	pod := Spec(spec.Namespace, spec.Name, cluster, image, spec.Labels, spec.Ports...)
	pod.Spec.Hostname, pod.Spec.Subdomain = spec.Hostname, spec.Subdomain
	created, err := Create(ctx, kube, cluster, pod)
	if err != nil {
		return nil, err
	}
	got, err := AwaitReady(ctx, kube, cluster, created, 3*time.Minute)
	if err != nil {
		return nil, err
	}
	return started{pod: got, kube: kube}, nil
}

// started is a pod a spec runs.
type started struct {
	pod  *corev1.Pod
	kube kubernetes.Interface
}

func (s started) Name() string { return s.pod.Name }

func (s started) IPOf(f corev1.IPFamily) (netip.Addr, bool) {
	for _, ip := range s.pod.Status.PodIPs {
		if a, err := netip.ParseAddr(ip.IP); err == nil && harness.FamilyOf(a) == f {
			return a, true
		}
	}
	return netip.Addr{}, false
}

func (s started) Delete(ctx context.Context) error {
	return s.kube.CoreV1().Pods(s.pod.Namespace).Delete(ctx, s.pod.Name, metav1.DeleteOptions{})
}
