package scale

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/mcsd-io/mcsd/test/lib/fixture"
	"github.com/mcsd-io/mcsd/test/lib/harness"
	"github.com/mcsd-io/mcsd/test/lib/netns"
)

// kubeProxyBinaryEnv names the kube-proxy binary the scenario runs beside
// mcsd's data plane (make bench-scale sets it); unset skips kube-proxy.
const kubeProxyBinaryEnv = "MCSD_SCALE_KUBE_PROXY"

func kubeProxyNamespaceOf(i int) string { return fmt.Sprintf("kp-%02d", i%namespaces) }

// kubeProxyResult is kube-proxy's memory once its rules held every service
// of the scenario, and how long that took from its start.
type kubeProxyResult struct {
	usage  harness.Usage
	synced time.Duration
}

// kubeProxyOnSameObjects writes the scenario as plain Kubernetes objects —
// a Service (ClusterIP, headless where mcsd's is) and one EndpointSlice
// per cluster with that cluster's endpoints — in namespaces of its own,
// runs kube-proxy in nftables mode in a node of its own until its rules
// hold every ClusterIP service, reads its memory, stops it, and deletes
// what it wrote, so that mcsd, started after, neither reads nor caches it.
func kubeProxyOnSameObjects(ctx context.Context, cs *harness.ClusterSet, m *fixture.Member, bin string, sc scenario, clusters []string) (res kubeProxyResult, err error) {
	cfg := rest.CopyConfig(m.Config)
	cfg.QPS = -1
	kube := kubernetes.NewForConfigOrDie(cfg)
	for i := range namespaces {
		if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: kubeProxyNamespaceOf(i)}}, metav1.CreateOptions{}); err != nil {
			return res, err
		}
	}
	defer func() {
		if derr := deleteKubeProxyObjects(ctx, kube, sc); derr != nil && err == nil {
			err = fmt.Errorf("deleting kube-proxy's objects: %w", derr)
		}
	}()
	clusterIPs := 0
	err = fixture.InParallel(ctx, 32, sc.services, func(ctx context.Context, i int) error {
		svc, slices := kubeProxyObjects(sc, i, clusters)
		if _, err := kube.CoreV1().Services(svc.Namespace).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating Service %s/%s: %w", svc.Namespace, svc.Name, err)
		}
		for _, s := range slices {
			if _, err := kube.DiscoveryV1().EndpointSlices(s.Namespace).Create(ctx, s, metav1.CreateOptions{}); err != nil {
				return fmt.Errorf("creating EndpointSlice %s/%s: %w", s.Namespace, s.Name, err)
			}
		}
		return nil
	})
	if err != nil {
		return res, err
	}
	for i := range sc.services {
		if i%headlessEvery != 0 {
			clusterIPs++
		}
	}

	node, err := m.AddNode(ctx)
	if err != nil {
		return res, err
	}
	stopForward, err := node.ForwardAPIServer()
	if err != nil {
		return res, err
	}
	defer stopForward()
	// nsenter execs kube-proxy in its own process: the program's usage is
	// kube-proxy's.
	began := time.Now()
	kp, err := cs.StartProgram("kube-proxy-"+sc.String(), "nsenter",
		append([]string{"--net=" + netns.Path(node.NS.Name), "--", bin}, node.KubeProxyArgs("nftables", "127.0.0.1:10249", "127.0.0.1:10256")...)...)
	if err != nil {
		return res, err
	}
	defer func() { _ = kp.Terminate(30 * time.Second) }()
	// Synced when its service map holds every ClusterIP service of the
	// scenario: kube-proxy's first sync waits for its informers and writes
	// every service with its endpoints in one transaction.
	var have int
	err = wait.PollUntilContextTimeout(ctx, time.Second, 30*time.Minute, true, func(ctx context.Context) (bool, error) {
		if done, err := kp.Exited(); done {
			return false, fmt.Errorf("kube-proxy exited (%v):\n%s", err, kp.Tail(20))
		}
		out, err := node.NS.Exec("nft", "list", "map", "ip", "kube-proxy", "service-ips")
		if err != nil {
			return false, nil
		}
		have = len(kubeProxyServiceElement.FindAllStringIndex(out, -1))
		return have >= clusterIPs, nil
	})
	if err != nil {
		return res, fmt.Errorf("kube-proxy's service-ips map holds %d of %d services: %w (its log: %s)", have, clusterIPs, err, kp.LogPath())
	}
	res.synced = time.Since(began)
	res.usage = kp.Usage()
	if res.usage.RSS == 0 {
		return res, errors.New("kube-proxy's memory could not be read")
	}
	return res, nil
}

// kubeProxyServiceElement is an element of kube-proxy's service-ips map
// for a service of the scenario: "... : goto service-<hash>-kp-NN/...".
var kubeProxyServiceElement = regexp.MustCompile(`goto service-[A-Z0-9]+-kp-[0-9]+/`)

// kubeProxyObjects is the scenario's i-th service as a Service and one
// EndpointSlice per cluster, each with the endpoints mcsd imports for it.
func kubeProxyObjects(sc scenario, i int, clusters []string) (*corev1.Service, []*discoveryv1.EndpointSlice) {
	ns, name := kubeProxyNamespaceOf(i), fmt.Sprintf("svc-%05d", i)
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(8080)}}},
	}
	if i%headlessEvery == 0 {
		svc.Spec.ClusterIP = corev1.ClusterIPNone
	}
	var slices []*discoveryv1.EndpointSlice
	for ci, c := range clusters {
		s := &discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-" + c, Labels: map[string]string{
				discoveryv1.LabelServiceName: name,
				discoveryv1.LabelManagedBy:   "scale.mcsd.io",
			}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To[int32](8080)}},
		}
		for _, addr := range sc.service(i, ci).Endpoints {
			s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{
				Addresses:  []string{addr},
				Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true), Serving: ptr.To(true), Terminating: ptr.To(false)},
			})
		}
		slices = append(slices, s)
	}
	return svc, slices
}

// deleteKubeProxyObjects deletes the slices by collection and the
// Services one by one (they have no delete-collection), then the
// namespaces, and waits until they are gone.
func deleteKubeProxyObjects(ctx context.Context, kube kubernetes.Interface, sc scenario) error {
	for i := range namespaces {
		if err := kube.DiscoveryV1().EndpointSlices(kubeProxyNamespaceOf(i)).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
			return err
		}
	}
	err := fixture.InParallel(ctx, 32, sc.services, func(ctx context.Context, i int) error {
		return kube.CoreV1().Services(kubeProxyNamespaceOf(i)).Delete(ctx, fmt.Sprintf("svc-%05d", i), metav1.DeleteOptions{})
	})
	if err != nil {
		return err
	}
	return deleteNamespaces(ctx, kube, kubeProxyNamespaceOf)
}

// deleteNamespaces deletes the scenario's namespaces nameOf(0..namespaces-1)
// and waits until they are gone.
func deleteNamespaces(ctx context.Context, kube kubernetes.Interface, nameOf func(int) string) error {
	for i := range namespaces {
		if err := kube.CoreV1().Namespaces().Delete(ctx, nameOf(i), metav1.DeleteOptions{}); err != nil {
			return err
		}
	}
	err := wait.PollUntilContextTimeout(ctx, time.Second, 10*time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := kube.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		for _, ns := range list.Items {
			for i := range namespaces {
				if ns.Name == nameOf(i) {
					return false, nil
				}
			}
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("namespaces %s and the like were not deleted: %w", nameOf(0), err)
	}
	return nil
}
