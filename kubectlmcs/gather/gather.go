// Package gather collects what a report about one member cluster of an
// mcsd clusterset needs into a tar.gz: the member's MCS objects, mcsd's own
// objects and pod logs, and this cluster's records on the broker, read with
// the member's own broker credentials. It never reads a Secret's data: the
// only Secret it touches is the member's broker kubeconfig, to reach the
// broker, and that is not written out.
package gather

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
	"sigs.k8s.io/yaml"

	aboutv1beta1 "github.com/mcsd-io/mcsd/apis/about/v1beta1"
	"github.com/mcsd-io/mcsd/broker"
	"github.com/mcsd-io/mcsd/internal/record"
	"github.com/mcsd-io/mcsd/kubectlmcs/membership"
	"github.com/mcsd-io/mcsd/kubectlmcs/status"
	"github.com/mcsd-io/mcsd/liveness"
)

// Options of Write.
type Options struct {
	// ClusterID overrides the member's resolved cluster ID.
	ClusterID string
	// Namespace is where mcsd runs in the member (default mcsd-system).
	Namespace string
	// BrokerNamespace overrides the namespace of the member's broker
	// kubeconfig.
	BrokerNamespace string
	// LogLines is how many of the last lines of each mcsd container's log
	// are kept (default 2000).
	LogLines int64
}

// Write writes the archive for the member cluster of member (an
// administrator's configuration) to w and returns the names of its files.
// What cannot be read is listed in the archive's errors.txt, not returned:
// a partial archive is still worth having.
func Write(ctx context.Context, w io.Writer, member *rest.Config, opts Options) ([]string, error) {
	if opts.Namespace == "" {
		opts.Namespace = membership.SecretNamespace
	}
	if opts.LogLines <= 0 {
		opts.LogLines = 2000
	}
	c, err := status.NewClients(member)
	if err != nil {
		return nil, err
	}
	kube, mcs, dyn := c.Kube, c.MCS, c.Dynamic
	a := &archive{files: map[string][]byte{}}
	all := metav1.ListOptions{}

	id, _, err := membership.ResolveClusterID(ctx, kube, dyn, opts.ClusterID)
	a.fail("cluster ID", err)
	a.add("member/serviceexports.yaml", func() (any, error) {
		return mcs.MulticlusterV1beta1().ServiceExports("").List(ctx, all)
	})
	a.add("member/serviceimports.yaml", func() (any, error) {
		return mcs.MulticlusterV1beta1().ServiceImports("").List(ctx, all)
	})
	a.add("member/endpointslices-mcs.yaml", func() (any, error) {
		return kube.DiscoveryV1().EndpointSlices("").List(ctx, metav1.ListOptions{LabelSelector: mcsv1beta1.LabelSourceCluster})
	})
	a.add("member/clusterproperties.yaml", func() (any, error) {
		return dyn.Resource(aboutv1beta1.SchemeGroupVersion.WithResource(aboutv1beta1.Resource)).List(ctx, all)
	})
	for _, crd := range []string{"serviceexports.multicluster.x-k8s.io", "serviceimports.multicluster.x-k8s.io", aboutv1beta1.Resource + "." + aboutv1beta1.GroupName} {
		a.add("member/crds/"+crd+".yaml", func() (any, error) {
			return dyn.Resource(schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}).Get(ctx, crd, metav1.GetOptions{})
		})
	}
	ns := opts.Namespace
	a.add("member/"+ns+"/daemonsets.yaml", func() (any, error) { return kube.AppsV1().DaemonSets(ns).List(ctx, all) })
	a.add("member/"+ns+"/deployments.yaml", func() (any, error) { return kube.AppsV1().Deployments(ns).List(ctx, all) })
	a.add("member/"+ns+"/pods.yaml", func() (any, error) { return kube.CoreV1().Pods(ns).List(ctx, all) })
	a.add("member/"+ns+"/services.yaml", func() (any, error) { return kube.CoreV1().Services(ns).List(ctx, all) })
	a.add("member/"+ns+"/leases.yaml", func() (any, error) { return kube.CoordinationV1().Leases(ns).List(ctx, all) })
	a.add("member/"+ns+"/events.yaml", func() (any, error) { return kube.CoreV1().Events(ns).List(ctx, all) })
	a.add("member/"+ns+"/configmaps.yaml", func() (any, error) { return kube.CoreV1().ConfigMaps(ns).List(ctx, all) })
	a.add("member/kube-system/coredns-configmap.yaml", func() (any, error) {
		return kube.CoreV1().ConfigMaps(metav1.NamespaceSystem).Get(ctx, "coredns", metav1.GetOptions{})
	})
	a.logs(ctx, kube, ns, opts.LogLines)
	a.liveness, err = status.ReadLiveness(ctx, kube, ns)
	a.fail("liveness", err)

	brokerCfg, secretNS, err := membership.BrokerConfigIn(ctx, kube, opts.Namespace)
	a.fail("broker credentials", err)
	if err == nil && id != "" {
		bns := opts.BrokerNamespace
		if bns == "" {
			bns = secretNS
		}
		if bns == "" {
			bns = broker.DefaultNamespace
		}
		a.broker(ctx, brokerCfg, bns, id)
	}
	return a.write(w, time.Now())
}

type archive struct {
	files  map[string][]byte
	errors []string
	// liveness is the member's liveness ConfigMap, which says of each
	// cluster of broker/clusters.yaml whether it is live.
	liveness *liveness.State
}

func (a *archive) fail(what string, err error) {
	if err != nil {
		a.errors = append(a.errors, what+": "+err.Error())
	}
}

// add stores what read returns as YAML, without managed fields.
func (a *archive) add(name string, read func() (any, error)) {
	obj, err := read()
	if err != nil {
		a.fail(name, err)
		return
	}
	stripManagedFields(obj)
	data, err := yaml.Marshal(obj)
	if err != nil {
		a.fail(name, err)
		return
	}
	a.files[name] = data
}

func stripManagedFields(obj any) {
	if ro, ok := obj.(runtime.Object); ok {
		if list, err := metaList(ro); err == nil {
			for _, item := range list {
				item.SetManagedFields(nil)
			}
			return
		}
	}
	if m, ok := obj.(metav1.Object); ok {
		m.SetManagedFields(nil)
	}
}

// logs keeps the last lines of each container of mcsd's pods, and of the
// previous run of those that restarted.
func (a *archive) logs(ctx context.Context, kube kubernetes.Interface, ns string, lines int64) {
	pods, err := kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		a.fail("pods of "+ns, err)
		return
	}
	for _, pod := range pods.Items {
		for _, cs := range pod.Status.ContainerStatuses {
			for _, previous := range []bool{false, true} {
				if previous && cs.RestartCount == 0 {
					continue
				}
				name := fmt.Sprintf("member/%s/logs/%s/%s.log", ns, pod.Name, cs.Name)
				if previous {
					name = fmt.Sprintf("member/%s/logs/%s/%s.previous.log", ns, pod.Name, cs.Name)
				}
				data, err := kube.CoreV1().Pods(ns).GetLogs(pod.Name, &corev1.PodLogOptions{Container: cs.Name, Previous: previous, TailLines: ptr.To(lines)}).DoRaw(ctx)
				if err != nil {
					a.fail(name, err)
					continue
				}
				a.files[name] = data
			}
		}
	}
}

// broker keeps this cluster's records on the broker and the clusterset's
// status as the broker shows it.
func (a *archive) broker(ctx context.Context, cfg *rest.Config, ns, id string) {
	c, err := status.NewClients(cfg)
	if err != nil {
		a.fail("broker", err)
		return
	}
	kube, mcs := c.Kube, c.MCS
	own := metav1.ListOptions{LabelSelector: record.ClusterSelector(id).String()}
	// Its records, slices and Lease, in its own namespace.
	mine := record.MemberNamespace(ns, id)
	a.add("broker/records.yaml", func() (any, error) { return mcs.MulticlusterV1beta1().ServiceImports(mine).List(ctx, own) })
	a.add("broker/endpointslices.yaml", func() (any, error) { return kube.DiscoveryV1().EndpointSlices(mine).List(ctx, own) })
	a.add("broker/leases.yaml", func() (any, error) { return kube.CoordinationV1().Leases(mine).List(ctx, own) })
	// Its ClusterSetIP claims and its declaration, in the broker namespace.
	a.add("broker/configmaps.yaml", func() (any, error) { return kube.CoreV1().ConfigMaps(ns).List(ctx, own) })
	a.add("broker/clusters.yaml", func() (any, error) {
		s, err := status.Read(ctx, kube, mcs, ns)
		if err != nil {
			return nil, err
		}
		return s.Clusters(a.liveness), nil
	})
}

func (a *archive) write(w io.Writer, now time.Time) ([]string, error) {
	if len(a.errors) > 0 {
		data := ""
		for _, e := range a.errors {
			data += e + "\n"
		}
		a.files["errors.txt"] = []byte(data)
	}
	names := make([]string, 0, len(a.files))
	for n := range a.files {
		names = append(names, n)
	}
	sort.Strings(names)
	gz := gzip.NewWriter(w)
	tw := tar.NewWriter(gz)
	for _, n := range names {
		data := a.files[n]
		if err := tw.WriteHeader(&tar.Header{Name: n, Mode: 0o644, Size: int64(len(data)), ModTime: now, Typeflag: tar.TypeReg}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return names, gz.Close()
}

// metaList returns the items of a list object, to change in place.
func metaList(obj runtime.Object) ([]metav1.Object, error) {
	items, err := meta.ExtractList(obj)
	if err != nil {
		return nil, err
	}
	out := make([]metav1.Object, 0, len(items))
	for _, it := range items {
		m, err := meta.Accessor(it)
		if err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	return out, nil
}
