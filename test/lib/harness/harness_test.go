package harness_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/mcsd-io/mcsd/test/lib/harness"
	"github.com/mcsd-io/mcsd/test/lib/netns"
	"github.com/mcsd-io/mcsd/test/lib/testenv"
)

func TestBrokerAndThreeClusters(t *testing.T) {
	testenv.RequireRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	began := time.Now()
	cs, err := harness.Up(ctx, harness.Options{Clusters: 3})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("broker + 3 clusters ready in %v", time.Since(began).Round(time.Millisecond))
	closed := false
	defer func() {
		if !closed {
			cs.Close()
		}
	}()
	t.Logf("control-plane RSS: %d MiB", controlPlaneRSS(t, cs.Dir)>>20)

	t.Run("step 1: every cluster is its own API server with a distinct kube-system UID", func(t *testing.T) {
		seen := map[string]string{}
		for _, c := range cs.All() {
			ns, err := c.Kube.CoreV1().Namespaces().Get(ctx, "kube-system", metav1.GetOptions{})
			if err != nil {
				t.Fatalf("%s: %v", c.Name, err)
			}
			if other, dup := seen[string(ns.UID)]; dup {
				t.Fatalf("%s and %s share kube-system UID %s", c.Name, other, ns.UID)
			}
			seen[string(ns.UID)] = c.Name
			if _, err := c.MCS.MulticlusterV1beta1().ServiceExports("default").List(ctx, metav1.ListOptions{}); err != nil {
				t.Fatalf("%s: mcs-api CRDs not served: %v", c.Name, err)
			}
		}
	})

	t.Run("step 2: RBAC is enforced for unprivileged users", func(t *testing.T) {
		cfg, err := cs.Members[0].UserConfig("nobody")
		if err != nil {
			t.Fatal(err)
		}
		kube := mustKube(t, cfg)
		_, err = kube.CoreV1().Secrets("default").List(ctx, metav1.ListOptions{})
		if !apierrors.IsForbidden(err) {
			t.Fatalf("listing secrets as nobody: got %v, want Forbidden", err)
		}
	})

	c1, c2 := cs.Members[0], cs.Members[1]
	node1, err := c1.AddNode(ctx)
	if err != nil {
		t.Fatal(err)
	}
	node2, err := c2.AddNode(ctx)
	if err != nil {
		t.Fatal(err)
	}
	client, err := node1.AddPod(ctx, harness.PodSpec{Name: "client", Labels: map[string]string{"app": "client"}})
	if err != nil {
		t.Fatal(err)
	}
	server, err := node2.AddPod(ctx, harness.PodSpec{Name: "server", Labels: map[string]string{"app": "server"}, Ports: []int32{8080, 9090}})
	if err != nil {
		t.Fatal(err)
	}

	t.Run("step 3: a pod in cluster1 reaches a pod in cluster2 over TCP and UDP", func(t *testing.T) {
		for _, network := range []string{"tcp", "udp"} {
			for _, port := range []string{"8080", "9090"} {
				id, err := client.Ask(ctx, network, server.IP.String()+":"+port)
				if err != nil {
					t.Fatalf("%s to %s:%s: %v", network, server.IP, port, err)
				}
				if id.Pod != "server" || id.Cluster != "cluster2" || id.IP != server.IP.String() {
					t.Fatalf("%s:%s answered by %+v, want server in cluster2", network, port, id)
				}
			}
		}
	})

	t.Run("step 4: a Service selecting a harness pod gets a real EndpointSlice", func(t *testing.T) {
		svc := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: "server", Namespace: "default"},
			Spec: corev1.ServiceSpec{
				Selector: map[string]string{"app": "server"},
				Ports:    []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolTCP}},
			},
		}
		if _, err := c2.Kube.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		var slice discoveryv1.EndpointSlice
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			list, err := c2.Kube.DiscoveryV1().EndpointSlices("default").List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=server"})
			if err != nil || len(list.Items) == 0 || len(list.Items[0].Endpoints) == 0 {
				return false, nil
			}
			slice = list.Items[0]
			return true, nil
		})
		if err != nil {
			t.Fatalf("no EndpointSlice with endpoints for Service server: %v", err)
		}
		ep := slice.Endpoints[0]
		if ep.Addresses[0] != server.IP.String() || !ptr.Deref(ep.Conditions.Ready, false) || ptr.Deref(ep.NodeName, "") != node2.Name {
			t.Fatalf("endpoint %+v, want ready %s on %s", ep, server.IP, node2.Name)
		}
		if len(slice.Ports) != 1 || ptr.Deref(slice.Ports[0].Port, 0) != 8080 {
			t.Fatalf("slice ports %+v, want the target port 8080", slice.Ports)
		}

		if err := server.SetReady(ctx, false); err != nil {
			t.Fatal(err)
		}
		err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			list, err := c2.Kube.DiscoveryV1().EndpointSlices("default").List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=server"})
			if err != nil || len(list.Items) == 0 || len(list.Items[0].Endpoints) == 0 {
				return false, nil
			}
			return !ptr.Deref(list.Items[0].Endpoints[0].Conditions.Ready, true), nil
		})
		if err != nil {
			t.Fatalf("endpoint never became not ready after the pod did: %v", err)
		}
	})

	t.Run("step 5: deleting an owner garbage-collects its dependents", func(t *testing.T) {
		owner, err := c1.MCS.MulticlusterV1beta1().ServiceImports("default").Create(ctx, &mcsv1beta1.ServiceImport{
			ObjectMeta: metav1.ObjectMeta{Name: "owner", Namespace: "default"},
			Spec: mcsv1beta1.ServiceImportSpec{
				Type:  mcsv1beta1.ClusterSetIP,
				Ports: []mcsv1beta1.ServicePort{{Port: 80, Protocol: corev1.ProtocolTCP}},
			},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		dependent := &discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{Name: "dependent", Namespace: "default", OwnerReferences: []metav1.OwnerReference{{
				APIVersion: mcsv1beta1.GroupVersion.String(), Kind: "ServiceImport", Name: owner.Name, UID: owner.UID,
			}}},
			AddressType: discoveryv1.AddressTypeIPv4,
		}
		if _, err := c1.Kube.DiscoveryV1().EndpointSlices("default").Create(ctx, dependent, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := c1.MCS.MulticlusterV1beta1().ServiceImports("default").Delete(ctx, owner.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			_, err := c1.Kube.DiscoveryV1().EndpointSlices("default").Get(ctx, "dependent", metav1.GetOptions{})
			return apierrors.IsNotFound(err), nil
		})
		if err != nil {
			t.Fatalf("dependent EndpointSlice survived its owner: %v", err)
		}
	})

	t.Run("step 6: a stopped API server comes back with its data", func(t *testing.T) {
		b := cs.Broker
		if _, err := b.Kube.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "survivor"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		b.StopAPIServer()
		if _, err := b.Kube.CoreV1().ConfigMaps("default").Get(ctx, "survivor", metav1.GetOptions{}); err == nil {
			t.Fatal("the API server answered while stopped")
		}
		if err := b.StartAPIServer(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := b.Kube.CoreV1().ConfigMaps("default").Get(ctx, "survivor", metav1.GetOptions{}); err != nil {
			t.Fatalf("data lost across an API server restart: %v", err)
		}
	})

	pids := recordedPIDs(t, cs.Dir)
	if len(pids) != 12 {
		t.Fatalf("expected 12 control-plane processes (3 per cluster), found %d", len(pids))
	}
	began = time.Now()
	cs.Close()
	closed = true
	t.Logf("teardown took %v", time.Since(began).Round(time.Millisecond))

	t.Run("step 7: teardown leaves no process, namespace or directory behind", func(t *testing.T) {
		for _, pid := range pids {
			if err := syscall.Kill(pid, 0); err == nil {
				t.Errorf("process %d still runs", pid)
			}
		}
		if _, err := os.Stat(cs.Dir); !os.IsNotExist(err) {
			t.Errorf("state directory %s still exists", cs.Dir)
		}
		left, err := netns.List("mcsdh" + strings.Split(filepath.Base(cs.Dir), "-")[0] + "-")
		if err != nil {
			t.Fatal(err)
		}
		if len(left) > 0 {
			t.Errorf("network namespaces left behind: %v", left)
		}
	})
}

func recordedPIDs(t *testing.T, dir string) []int {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, "*.pid"))
	var pids []int
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
		if err != nil {
			t.Fatal(err)
		}
		pids = append(pids, pid)
	}
	return pids
}

// controlPlaneRSS sums the resident memory of the run's processes.
func controlPlaneRSS(t *testing.T, dir string) int64 {
	var total int64
	for _, pid := range recordedPIDs(t, dir) {
		data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(data), "\n") {
			if f := strings.Fields(line); len(f) == 3 && f[0] == "VmRSS:" {
				kb, _ := strconv.ParseInt(f[1], 10, 64)
				total += kb << 10
			}
		}
	}
	return total
}
