package importer_test

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/mcsd-io/mcsd/importer"
	"github.com/mcsd-io/mcsd/internal/merge"
	"github.com/mcsd-io/mcsd/internal/record"
	"github.com/mcsd-io/mcsd/liveness"
	"github.com/mcsd-io/mcsd/mcsslice"
	"github.com/mcsd-io/mcsd/test/lib/fixture"
	"github.com/mcsd-io/mcsd/test/lib/harness"
	"github.com/mcsd-io/mcsd/test/lib/hold"
)

// Short heartbeats, so the TTL tests take seconds: a Lease renewed every
// 0.8 s, and a cluster gone after 6 s without a renewal.
const (
	leaseDuration = 4 * time.Second
	clusterTTL    = 6 * time.Second
)

type env struct {
	t *testing.T
	// root is the whole test: exporters and importers started on it run
	// until the test ends, not just the subtest that started them.
	root      *testing.T
	ctx       context.Context
	cs        *harness.ClusterSet
	members   []*fixture.Member
	nodes     map[string]*harness.Node
	exporters map[string]*fixture.Exporter
	importers map[string]*fixture.Importer
}

func (e *env) startExporter(m *fixture.Member) {
	e.exporters[m.ID] = fixture.StartExporter(e.root, m, fixture.ExporterOptions{LeaseDuration: leaseDuration})
}

func (e *env) startImporter(m *fixture.Member) {
	e.importers[m.ID] = fixture.StartImporter(e.root, m, fixture.ImporterOptions{ClusterTTL: clusterTTL})
}

func (e *env) namespace(name string, in ...*fixture.Member) {
	e.t.Helper()
	for _, m := range in {
		_, err := m.Kube.CoreV1().Namespaces().Create(e.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			e.t.Fatal(err)
		}
	}
}

// service creates a Service selecting app=name and, unless noPod, a ready
// pod behind it; it returns the pod's IP.
func (e *env) service(m *fixture.Member, ns, name string, withPod bool, mutate func(*corev1.Service)) string {
	e.t.Helper()
	svc := fixture.WebService(ns, name, name)
	if mutate != nil {
		mutate(svc)
	}
	if _, err := m.Kube.CoreV1().Services(ns).Create(e.ctx, svc, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
	if !withPod {
		return ""
	}
	pod, err := e.nodes[m.ID].AddPod(e.ctx, harness.PodSpec{Namespace: ns, Name: name + "-" + m.ID, Labels: map[string]string{"app": name}})
	if err != nil {
		e.t.Fatal(err)
	}
	return pod.IP.String()
}

func (e *env) export(m *fixture.Member, ns, name string, mutate func(*mcsv1beta1.ServiceExport)) time.Time {
	e.t.Helper()
	se := &mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	if mutate != nil {
		mutate(se)
	}
	began := time.Now()
	if _, err := m.MCS.MulticlusterV1beta1().ServiceExports(ns).Create(e.ctx, se, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
	return began
}

func (e *env) unexport(m *fixture.Member, ns, name string) {
	e.t.Helper()
	if err := m.MCS.MulticlusterV1beta1().ServiceExports(ns).Delete(e.ctx, name, metav1.DeleteOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

// imported waits until m's ServiceImport ns/name satisfies ok, and returns it.
func (e *env) imported(m *fixture.Member, ns, name string, timeout time.Duration, what string, ok func(*mcsv1beta1.ServiceImport) bool) *mcsv1beta1.ServiceImport {
	e.t.Helper()
	// The last answer of the API server, so that a timeout says what was
	// there rather than the error of the poll the deadline cut short.
	var si *mcsv1beta1.ServiceImport
	var lastErr error
	err := wait.PollUntilContextTimeout(e.ctx, 50*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		got, err := m.MCS.MulticlusterV1beta1().ServiceImports(ns).Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			si, lastErr = nil, err
			return false, nil
		case err != nil:
			return false, nil
		}
		si, lastErr = got, nil
		return ok(si), nil
	})
	if err != nil {
		seen := dump(si)
		if lastErr != nil {
			seen = lastErr.Error()
		}
		e.t.Fatalf("%s: ServiceImport %s/%s never %s within %v; last seen: %s\n%s", m.ID, ns, name, what, timeout, seen, e.explain(m, ns, name))
	}
	return si
}

// gone waits until m has no ServiceImport ns/name and no MCS slices of it.
func (e *env) gone(m *fixture.Member, ns, name string, timeout time.Duration) {
	e.t.Helper()
	err := wait.PollUntilContextTimeout(e.ctx, 50*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		_, err := m.MCS.MulticlusterV1beta1().ServiceImports(ns).Get(ctx, name, metav1.GetOptions{})
		if !apierrors.IsNotFound(err) {
			return false, nil
		}
		return len(e.slices(m, ns, name)) == 0, nil
	})
	if err != nil {
		e.t.Fatalf("%s: the import of %s/%s (ServiceImport or slices) survived %v", m.ID, ns, name, timeout)
	}
}

// slices lists m's MCS EndpointSlices of the service ns/name.
func (e *env) slices(m *fixture.Member, ns, name string) []discoveryv1.EndpointSlice {
	e.t.Helper()
	list, err := m.Kube.DiscoveryV1().EndpointSlices(ns).List(e.ctx, metav1.ListOptions{
		LabelSelector: labels.SelectorFromSet(labels.Set{mcsv1beta1.LabelServiceName: name}).String(),
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return list.Items
}

// bySource is m's endpoints of ns/name now: source cluster -> endpoint
// addresses, sorted.
func (e *env) bySource(m *fixture.Member, ns, name string) (map[string][]string, []discoveryv1.EndpointSlice) {
	e.t.Helper()
	items := e.slices(m, ns, name)
	got := map[string][]string{}
	for _, s := range items {
		c := s.Labels[mcsv1beta1.LabelSourceCluster]
		if _, ok := got[c]; !ok {
			got[c] = []string{}
		}
		for _, ep := range s.Endpoints {
			got[c] = append(got[c], ep.Addresses...)
		}
		slices.Sort(got[c])
	}
	return got, items
}

// endpointsBySource waits until m's slices of ns/name hold exactly want:
// source cluster -> endpoint addresses.
func (e *env) endpointsBySource(m *fixture.Member, ns, name string, timeout time.Duration, want map[string][]string) []discoveryv1.EndpointSlice {
	e.t.Helper()
	var got map[string][]string
	var items []discoveryv1.EndpointSlice
	err := wait.PollUntilContextTimeout(e.ctx, 50*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		got, items = e.bySource(m, ns, name)
		return apiequality.Semantic.DeepEqual(got, want), nil
	})
	if err != nil {
		e.t.Fatalf("%s: endpoints of %s/%s by source cluster %v, want %v within %v", m.ID, ns, name, got, want, timeout)
	}
	return items
}

// successfulSyncs is how many syncs m's importer has completed.
func (e *env) successfulSyncs(m *fixture.Member) float64 {
	return metricValue(e.importers[m.ID].Registry, "mcsd_importer_syncs_total", map[string]string{"result": "success"})
}

// awaitSyncsPast waits until m's importer has completed more syncs than
// before: a positive sync point after which a hold means something.
func (e *env) awaitSyncsPast(m *fixture.Member, before float64) {
	e.t.Helper()
	if err := wait.PollUntilContextTimeout(e.ctx, 20*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return e.successfulSyncs(m) > before, nil
	}); err != nil {
		e.t.Fatalf("%s: the importer made no sync past %v within a minute", m.ID, before)
	}
}

func clustersOf(si *mcsv1beta1.ServiceImport) []string {
	var out []string
	for _, c := range si.Status.Clusters {
		out = append(out, c.Cluster)
	}
	return out
}

func readyIs(si *mcsv1beta1.ServiceImport, status metav1.ConditionStatus, reason string) bool {
	c := meta.FindStatusCondition(si.Status.Conditions, string(mcsv1beta1.ServiceImportConditionReady))
	return c != nil && c.Status == status && c.Reason == reason && c.ObservedGeneration == si.Generation
}

func dump(si *mcsv1beta1.ServiceImport) string {
	if si == nil {
		return "none"
	}
	return fmt.Sprintf("spec %+v labels %v status %+v", si.Spec, si.Labels, si.Status)
}

// brokerMerge merges the broker's records of a service, as every importer
// should.
func (e *env) brokerMerge(ns, name string) merge.Result {
	e.t.Helper()
	list, err := e.cs.Broker.MCS.MulticlusterV1beta1().ServiceImports(metav1.NamespaceAll).List(e.ctx, metav1.ListOptions{LabelSelector: record.ServiceSelector(ns, name).String()})
	if err != nil {
		e.t.Fatal(err)
	}
	var all []record.Export
	for i := range list.Items {
		r, err := record.Decode(&list.Items[i])
		if err != nil {
			e.t.Fatal(err)
		}
		all = append(all, r)
	}
	res, err := merge.Merge(all)
	if err != nil {
		e.t.Fatal(err)
	}
	return res
}

// event waits for an event with reason on m's ServiceImport ns/name.
func (e *env) event(m *fixture.Member, ns, name, reason string) corev1.Event {
	e.t.Helper()
	return e.eventOn(m, "ServiceImport", ns, name, reason)
}

// livenessEvent waits for a summary event of the importer on m's liveness
// ConfigMap.
func (e *env) livenessEvent(m *fixture.Member, reason string) corev1.Event {
	e.t.Helper()
	return e.eventOn(m, "ConfigMap", liveness.DefaultNamespace, liveness.ConfigMapName, reason)
}

func (e *env) eventOn(m *fixture.Member, kind, ns, name, reason string) corev1.Event {
	e.t.Helper()
	var found corev1.Event
	err := wait.PollUntilContextTimeout(e.ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		list, err := m.Kube.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name + ",reason=" + reason})
		if err != nil || len(list.Items) == 0 {
			return false, nil
		}
		found = list.Items[0]
		return found.InvolvedObject.Kind == kind, nil
	})
	if err != nil {
		e.t.Fatalf("%s: no %s event on %s %s/%s", m.ID, reason, kind, ns, name)
	}
	return found
}

// explain says what an import of ns/name was made from, for a failure:
// m's published liveness and the broker's records of the service.
func (e *env) explain(m *fixture.Member, ns, name string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var b strings.Builder
	if cm, err := m.Kube.CoreV1().ConfigMaps(liveness.DefaultNamespace).Get(ctx, liveness.ConfigMapName, metav1.GetOptions{}); err != nil {
		fmt.Fprintf(&b, "liveness: %v\n", err)
	} else {
		fmt.Fprintf(&b, "liveness: %+v\n", liveness.Read(cm))
	}
	list, err := e.cs.Broker.MCS.MulticlusterV1beta1().ServiceImports(metav1.NamespaceAll).List(ctx, metav1.ListOptions{LabelSelector: record.ServiceSelector(ns, name).String()})
	if err != nil {
		fmt.Fprintf(&b, "broker records: %v\n", err)
		return b.String()
	}
	for _, r := range list.Items {
		fmt.Fprintf(&b, "broker record %s/%s created %s deleting %v: spec %+v\n", r.Namespace, r.Name, r.CreationTimestamp.UTC().Format(time.RFC3339), r.DeletionTimestamp != nil, r.Spec)
	}
	return b.String()
}

// liveness waits until m's liveness ConfigMap satisfies ok.
func (e *env) liveness(m *fixture.Member, within time.Duration, what string, ok func(liveness.State) bool) liveness.State {
	e.t.Helper()
	var last liveness.State
	err := wait.PollUntilContextTimeout(e.ctx, 20*time.Millisecond, within, true, func(ctx context.Context) (bool, error) {
		cm, err := m.Kube.CoreV1().ConfigMaps(liveness.DefaultNamespace).Get(ctx, liveness.ConfigMapName, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		last = liveness.Read(cm)
		return ok(last), nil
	})
	if err != nil {
		e.t.Fatalf("%s: the liveness ConfigMap is not %s within %v: %+v", m.ID, what, within, last)
	}
	return last
}

// metricValue is the value of the metric name with the given labels in
// reg, 0 when there is none.
func metricValue(reg *prometheus.Registry, name string, labels map[string]string) float64 {
	families, err := reg.Gather()
	if err != nil {
		return 0
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if matches(m, labels) {
				switch {
				case m.GetCounter() != nil:
					return m.GetCounter().GetValue()
				case m.GetGauge() != nil:
					return m.GetGauge().GetValue()
				}
			}
		}
	}
	return 0
}

func matches(m *dto.Metric, want map[string]string) bool {
	n := 0
	for _, l := range m.GetLabel() {
		if v, ok := want[l.GetName()]; ok {
			if v != l.GetValue() {
				return false
			}
			n++
		}
	}
	return n == len(want)
}

func mustAddr(t *testing.T, s string) netip.Addr {
	t.Helper()
	a, err := netip.ParseAddr(s)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func TestImporterAgainstABrokerAndThreeClusters(t *testing.T) {
	cs := harness.Start(t, harness.Options{Clusters: 3})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	members := fixture.Join(t, cs)
	e := &env{t: t, root: t, ctx: ctx, cs: cs, members: members, nodes: map[string]*harness.Node{},
		exporters: map[string]*fixture.Exporter{}, importers: map[string]*fixture.Importer{}}
	for _, m := range members {
		node, err := m.AddNode(ctx)
		if err != nil {
			t.Fatal(err)
		}
		e.nodes[m.ID] = node
		e.startExporter(m)
		e.startImporter(m)
	}
	c1, c2, c3 := members[0], members[1], members[2]
	e.namespace("app", members...)
	const minute = time.Minute

	var vip string
	var webPods = map[string]string{}
	t.Run("step 1: a service exported by one cluster is imported into all three, the exporting one too, as the merge says", func(t *testing.T) {
		e.t = t
		webPods[c1.ID] = e.service(c1, "app", "web", true, func(s *corev1.Service) {
			s.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
			s.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptr.To[int32](300)}}
			s.Spec.InternalTrafficPolicy = ptr.To(corev1.ServiceInternalTrafficPolicyLocal)
			s.Spec.TrafficDistribution = ptr.To(corev1.ServiceTrafficDistributionPreferClose)
			s.Spec.Ports = append(s.Spec.Ports, corev1.ServicePort{Name: "dns", Port: 53, TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolUDP})
		})
		e.export(c1, "app", "web", func(se *mcsv1beta1.ServiceExport) {
			se.Spec.ExportedLabels = map[string]string{"tier": "gold"}
			se.Spec.ExportedAnnotations = map[string]string{"example.com/owner": "team-web"}
		})
		for _, m := range members {
			si := e.imported(m, "app", "web", minute, "ready with a VIP from cluster1", func(si *mcsv1beta1.ServiceImport) bool {
				return len(si.Spec.IPs) == 1 && readyIs(si, metav1.ConditionTrue, "Ready")
			})
			res := e.brokerMerge("app", "web")
			want := res.Spec
			if !apiequality.Semantic.DeepEqual(si.Spec, want) {
				t.Fatalf("%s: spec %+v, want the merge's %+v", m.ID, si.Spec, want)
			}
			if si.Spec.Type != mcsv1beta1.ClusterSetIP || len(si.Spec.Ports) != 2 || si.Spec.SessionAffinity != corev1.ServiceAffinityClientIP ||
				ptr.Deref(si.Spec.SessionAffinityConfig.ClientIP.TimeoutSeconds, 0) != 300 ||
				ptr.Deref(si.Spec.InternalTrafficPolicy, "") != corev1.ServiceInternalTrafficPolicyLocal ||
				ptr.Deref(si.Spec.TrafficDistribution, "") != corev1.ServiceTrafficDistributionPreferClose ||
				!slices.Equal(si.Spec.IPFamilies, []corev1.IPFamily{corev1.IPv4Protocol}) {
				t.Fatalf("%s: spec %+v does not carry the exported Service's properties", m.ID, si.Spec)
			}
			if si.Labels["tier"] != "gold" || si.Annotations["example.com/owner"] != "team-web" {
				t.Fatalf("%s: labels %v annotations %v, want the exported ones", m.ID, si.Labels, si.Annotations)
			}
			if got := clustersOf(si); !slices.Equal(got, []string{c1.ID}) {
				t.Fatalf("%s: status.clusters %v", m.ID, got)
			}
			if vip == "" {
				vip = si.Spec.IPs[0]
			}
			if si.Spec.IPs[0] != vip {
				t.Fatalf("%s: VIP %s, another cluster has %s", m.ID, si.Spec.IPs[0], vip)
			}
			items := e.endpointsBySource(m, "app", "web", minute, map[string][]string{c1.ID: {webPods[c1.ID]}})
			s := items[0]
			if len(items) != 1 || s.Name != mcsslice.Name("web", c1.ID, discoveryv1.AddressTypeIPv4, 0) || s.AddressType != discoveryv1.AddressTypeIPv4 {
				t.Fatalf("%s: slices %v", m.ID, items)
			}
			if s.Labels[discoveryv1.LabelManagedBy] != mcsslice.Manager || s.Labels[mcsv1beta1.LabelServiceName] != "web" {
				t.Fatalf("%s: slice labels %v", m.ID, s.Labels)
			}
			if _, ok := s.Labels[discoveryv1.LabelServiceName]; ok {
				t.Fatalf("%s: slice carries kubernetes.io/service-name", m.ID)
			}
			if len(s.OwnerReferences) != 1 || s.OwnerReferences[0].UID != si.UID || !ptr.Deref(s.OwnerReferences[0].Controller, false) {
				t.Fatalf("%s: slice owners %+v, want the ServiceImport %s", m.ID, s.OwnerReferences, si.UID)
			}
			ports, err := mcsslice.DecodeServicePorts(s.Annotations[mcsslice.ServicePortsAnnotation])
			if err != nil {
				t.Fatal(err)
			}
			if p, _ := ports.Lookup("http", corev1.ProtocolTCP); p != 80 || len(ports) != 2 {
				t.Fatalf("%s: service ports %v", m.ID, ports)
			}
		}
		if !c1.Blocks[corev1.IPv4Protocol].Contains(mustAddr(t, vip)) {
			t.Fatalf("VIP %s is not from the exporting cluster's block %s", vip, c1.Blocks[corev1.IPv4Protocol])
		}
		// Imports are routine: logged, not one Event each.
		if list, err := c2.Kube.CoreV1().Events("app").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=web,involvedObject.kind=ServiceImport"}); err != nil || len(list.Items) != 0 {
			t.Fatalf("events on the new ServiceImport: %v (%v), want none", list, err)
		}
		e.liveness(c2, 5*time.Second, "naming cluster1 live", func(s liveness.State) bool {
			return s.Clusters[c1.ID] == liveness.Live && s.BrokerReachable
		})
	})

	t.Run("step 2: a second exporting cluster adds its own slice in every cluster, and the VIP stays", func(t *testing.T) {
		e.t = t
		webPods[c2.ID] = e.service(c2, "app", "web", true, func(s *corev1.Service) {
			s.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
			s.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptr.To[int32](300)}}
			s.Spec.InternalTrafficPolicy = ptr.To(corev1.ServiceInternalTrafficPolicyLocal)
			s.Spec.TrafficDistribution = ptr.To(corev1.ServiceTrafficDistributionPreferClose)
			s.Spec.Ports[0].Port = 8000 // same name, another number: the oldest's 80 is kept
		})
		e.export(c2, "app", "web", func(se *mcsv1beta1.ServiceExport) {
			se.Spec.ExportedLabels = map[string]string{"tier": "gold"}
			se.Spec.ExportedAnnotations = map[string]string{"example.com/owner": "team-web"}
		})
		for _, m := range members {
			si := e.imported(m, "app", "web", minute, "imported from both clusters", func(si *mcsv1beta1.ServiceImport) bool {
				return slices.Equal(clustersOf(si), []string{c1.ID, c2.ID})
			})
			if !slices.Equal(si.Spec.IPs, []string{vip}) {
				t.Fatalf("%s: IPs %v, want %s", m.ID, si.Spec.IPs, vip)
			}
			items := e.endpointsBySource(m, "app", "web", minute, map[string][]string{c1.ID: {webPods[c1.ID]}, c2.ID: {webPods[c2.ID]}})
			for _, s := range items {
				ports, _ := mcsslice.DecodeServicePorts(s.Annotations[mcsslice.ServicePortsAnnotation])
				want := map[string]int32{c1.ID: 80, c2.ID: 8000}[s.Labels[mcsv1beta1.LabelSourceCluster]]
				if p, _ := ports.Lookup("http", corev1.ProtocolTCP); p != want {
					t.Fatalf("%s: slice %s says http is on %d, want %d", m.ID, s.Name, p, want)
				}
			}
		}
	})

	t.Run("step 3: a headless service has ipFamilies and no IPs; the cluster that loses the type conflict contributes nothing", func(t *testing.T) {
		e.t = t
		dbPod := e.service(c1, "app", "db", true, func(s *corev1.Service) { s.Spec.ClusterIP = corev1.ClusterIPNone })
		e.export(c1, "app", "db", nil)
		for _, m := range members {
			e.imported(m, "app", "db", minute, "headless", func(si *mcsv1beta1.ServiceImport) bool {
				return si.Spec.Type == mcsv1beta1.Headless && len(si.Spec.IPs) == 0 &&
					slices.Equal(si.Spec.IPFamilies, []corev1.IPFamily{corev1.IPv4Protocol}) && readyIs(si, metav1.ConditionTrue, "Ready")
			})
		}
		e.service(c2, "app", "db", true, nil)
		e.export(c2, "app", "db", nil)
		// cluster2's record reaches the broker, conflicts, and changes nothing.
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, minute, true, func(context.Context) (bool, error) {
			res := e.brokerMerge("app", "db")
			_, ok := res.Verdict(c2.ID)
			return ok, nil
		})
		if err != nil {
			t.Fatal("cluster2's export of app/db never reached the broker")
		}
		for _, m := range members {
			si := e.imported(m, "app", "db", minute, "headless", func(si *mcsv1beta1.ServiceImport) bool {
				return si.Spec.Type == mcsv1beta1.Headless
			})
			if got := clustersOf(si); !slices.Equal(got, []string{c1.ID}) || len(si.Spec.IPs) != 0 {
				t.Fatalf("%s: clusters %v, IPs %v; the ClusterIP export must not contribute", m.ID, got, si.Spec.IPs)
			}
			e.endpointsBySource(m, "app", "db", minute, map[string][]string{c1.ID: {dbPod}})
		}
	})

	t.Run("step 4: a service is not imported where its namespace is missing, and is once the namespace appears", func(t *testing.T) {
		e.t = t
		e.namespace("late", c1, c2)
		e.service(c1, "late", "api", false, nil)
		c3Syncs := e.successfulSyncs(c3)
		e.export(c1, "late", "api", nil)
		e.imported(c1, "late", "api", minute, "created", func(*mcsv1beta1.ServiceImport) bool { return true })
		e.imported(c2, "late", "api", minute, "created", func(*mcsv1beta1.ServiceImport) bool { return true })
		// cluster3's importer has looked at the service since, and does
		// not import it for as long as its namespace is missing.
		e.awaitSyncsPast(c3, c3Syncs)
		if err := hold.For(ctx, 2*time.Second, 100*time.Millisecond, func(ctx context.Context) error {
			_, err := c3.MCS.MulticlusterV1beta1().ServiceImports("late").Get(ctx, "api", metav1.GetOptions{})
			if !apierrors.IsNotFound(err) {
				return fmt.Errorf("cluster3 without the namespace: %v, want not found", err)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		created := time.Now()
		e.namespace("late", c3)
		e.imported(c3, "late", "api", 20*time.Second, "created after its namespace", func(si *mcsv1beta1.ServiceImport) bool { return len(si.Spec.IPs) == 1 })
		t.Logf("imported %v after the namespace appeared", time.Since(created).Round(time.Millisecond))
	})

	t.Run("step 5: hand edits of the ServiceImport and its slices are reverted", func(t *testing.T) {
		e.t = t
		si := e.imported(c3, "app", "web", minute, "present", func(*mcsv1beta1.ServiceImport) bool { return true })
		want := si.Spec
		si.Spec.Ports = []mcsv1beta1.ServicePort{{Name: "hacked", Port: 1, Protocol: corev1.ProtocolTCP}}
		si.Spec.IPs = []string{"243.255.255.254"}
		si.Labels["tier"] = "tin"
		si.Labels["team"] = "ours"
		if _, err := c3.MCS.MulticlusterV1beta1().ServiceImports("app").Update(ctx, si, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		after := e.imported(c3, "app", "web", 20*time.Second, "reverted", func(si *mcsv1beta1.ServiceImport) bool {
			return apiequality.Semantic.DeepEqual(si.Spec, want) && si.Labels["tier"] == "gold"
		})
		if after.Labels["team"] != "ours" {
			t.Fatalf("a label the importer does not own was removed: %v", after.Labels)
		}

		name := mcsslice.Name("web", c1.ID, discoveryv1.AddressTypeIPv4, 0)
		s, err := c3.Kube.DiscoveryV1().EndpointSlices("app").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		s.Labels[discoveryv1.LabelServiceName] = "web"
		s.Endpoints = nil
		if _, err := c3.Kube.DiscoveryV1().EndpointSlices("app").Update(ctx, s, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 20*time.Second, true, func(ctx context.Context) (bool, error) {
			s, err := c3.Kube.DiscoveryV1().EndpointSlices("app").Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			_, core := s.Labels[discoveryv1.LabelServiceName]
			return !core && len(s.Endpoints) == 1, nil
		})
		if err != nil {
			t.Fatal("the edited slice was not repaired")
		}
		if err := c3.Kube.DiscoveryV1().EndpointSlices("app").Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		e.endpointsBySource(c3, "app", "web", 20*time.Second, map[string][]string{c1.ID: {webPods[c1.ID]}, c2.ID: {webPods[c2.ID]}})
	})

	t.Run("step 6: the VIP survives restarting every importer and exporter", func(t *testing.T) {
		e.t = t
		uids := map[string]string{}
		for _, m := range members {
			uids[m.ID] = string(e.imported(m, "app", "web", minute, "present", func(*mcsv1beta1.ServiceImport) bool { return true }).UID)
			e.importers[m.ID].Stop()
			e.exporters[m.ID].Stop()
		}
		for _, m := range members {
			e.startExporter(m)
			e.startImporter(m)
		}
		// Once every restarted importer has synced, the ServiceImports
		// keep their VIP and identity.
		for _, m := range members {
			e.awaitSyncsPast(m, 0)
		}
		if err := hold.For(ctx, 3*time.Second, 100*time.Millisecond, func(ctx context.Context) error {
			for _, m := range members {
				si, err := m.MCS.MulticlusterV1beta1().ServiceImports("app").Get(ctx, "web", metav1.GetOptions{})
				if err != nil {
					return fmt.Errorf("%s: %w", m.ID, err)
				}
				if !slices.Equal(si.Spec.IPs, []string{vip}) || string(si.UID) != uids[m.ID] || len(clustersOf(si)) != 2 {
					return fmt.Errorf("%s: after restarts IPs %v (want %s), UID %s (was %s), clusters %v", m.ID, si.Spec.IPs, vip, si.UID, uids[m.ID], clustersOf(si))
				}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		for _, m := range members {
			e.imported(m, "app", "web", minute, "ready", func(si *mcsv1beta1.ServiceImport) bool {
				return readyIs(si, metav1.ConditionTrue, "Ready") && len(clustersOf(si)) == 2
			})
		}
	})

	t.Run("step 7: the VIP stays when the allocating cluster stops exporting while another still exports", func(t *testing.T) {
		e.t = t
		// cluster2's record holds a copy of cluster1's VIP, as every
		// exporter copies the merged VIP: a copy of what the block's owner
		// gives the same service counts (vipalloc.Rule), and no
		// importer reports it.
		for _, m := range members {
			list, err := m.Kube.CoreV1().Events("app").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=web,reason=" + importer.ReasonClusterSetIPNotOwned})
			if err != nil || len(list.Items) != 0 {
				t.Fatalf("%s: %v (%v): a copy of the owner's VIP was reported", m.ID, list, err)
			}
		}
		e.unexport(c1, "app", "web")
		for _, m := range members {
			si := e.imported(m, "app", "web", minute, "imported from cluster2 only", func(si *mcsv1beta1.ServiceImport) bool {
				return slices.Equal(clustersOf(si), []string{c2.ID})
			})
			if !slices.Equal(si.Spec.IPs, []string{vip}) {
				t.Fatalf("%s: IPs %v after the allocating cluster left, want %s", m.ID, si.Spec.IPs, vip)
			}
			e.endpointsBySource(m, "app", "web", minute, map[string][]string{c2.ID: {webPods[c2.ID]}})
		}
	})

	t.Run("step 8: two clusters exporting a new service at the same moment end with one VIP everywhere", func(t *testing.T) {
		e.t = t
		e.service(c2, "app", "race", false, nil)
		e.service(c3, "app", "race", false, nil)
		var wg sync.WaitGroup
		for _, m := range []*fixture.Member{c2, c3} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				se := &mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: "app", Name: "race"}}
				if _, err := m.MCS.MulticlusterV1beta1().ServiceExports("app").Create(ctx, se, metav1.CreateOptions{}); err != nil {
					t.Error(err)
				}
			}()
		}
		wg.Wait()
		var seen []string
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, minute, true, func(ctx context.Context) (bool, error) {
			seen = nil
			for _, m := range members {
				si, err := m.MCS.MulticlusterV1beta1().ServiceImports("app").Get(ctx, "race", metav1.GetOptions{})
				if err != nil || len(si.Spec.IPs) != 1 || len(si.Status.Clusters) != 2 {
					return false, nil
				}
				seen = append(seen, si.Spec.IPs[0])
			}
			res := e.brokerMerge("app", "race")
			return len(res.Spec.IPs) == 1 && seen[0] == res.Spec.IPs[0] && seen[1] == seen[0] && seen[2] == seen[0], nil
		})
		if err != nil {
			t.Fatalf("the clusters never agreed on one VIP: %v", seen)
		}
		// And they stay agreed: each exporter adopts the merged VIP.
		if err := hold.For(ctx, 2*time.Second, 100*time.Millisecond, func(ctx context.Context) error {
			for _, m := range members {
				si, err := m.MCS.MulticlusterV1beta1().ServiceImports("app").Get(ctx, "race", metav1.GetOptions{})
				if err != nil {
					return fmt.Errorf("%s: %w", m.ID, err)
				}
				if !slices.Equal(si.Spec.IPs, seen[:1]) {
					return fmt.Errorf("%s: VIP moved to %v from %s", m.ID, si.Spec.IPs, seen[0])
				}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("step 9: the ServiceImport and slices go from every cluster within 20 s of the last unexport", func(t *testing.T) {
		e.t = t
		began := time.Now()
		e.unexport(c2, "app", "web")
		for _, m := range members {
			e.gone(m, "app", "web", 20*time.Second)
		}
		t.Logf("unexport -> ServiceImport and slices gone in all 3 clusters: %v", time.Since(began).Round(time.Millisecond))
	})

	ttlPods := map[string]string{}
	t.Run("step 10: a cluster that stops renewing its Lease loses its endpoints within the TTL, and gets them back when it renews", func(t *testing.T) {
		e.t = t
		ttlPods[c1.ID] = e.service(c1, "app", "ttl", true, nil)
		ttlPods[c3.ID] = e.service(c3, "app", "ttl", true, nil)
		e.export(c1, "app", "ttl", nil)
		e.export(c3, "app", "ttl", nil)
		both := map[string][]string{c1.ID: {ttlPods[c1.ID]}, c3.ID: {ttlPods[c3.ID]}}
		for _, m := range members {
			e.endpointsBySource(m, "app", "ttl", minute, both)
		}
		ttlVIP := e.imported(c1, "app", "ttl", minute, "with a VIP", func(si *mcsv1beta1.ServiceImport) bool { return len(si.Spec.IPs) == 1 }).Spec.IPs[0]

		stopped := time.Now()
		e.exporters[c3.ID].Stop()
		onlyC1 := map[string][]string{c1.ID: {ttlPods[c1.ID]}}
		var wg sync.WaitGroup
		took := map[string]time.Duration{}
		var mu sync.Mutex
		for _, m := range []*fixture.Member{c1, c2} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				e.endpointsBySource(m, "app", "ttl", clusterTTL+2*time.Second, onlyC1)
				mu.Lock()
				took[m.ID] = time.Since(stopped)
				mu.Unlock()
			}()
		}
		wg.Wait()
		if t.Failed() {
			t.FailNow()
		}
		t.Logf("cluster3 stopped renewing -> its endpoints gone: %v in cluster1, %v in cluster2 (TTL %v)",
			took[c1.ID].Round(time.Millisecond), took[c2.ID].Round(time.Millisecond), clusterTTL)
		for _, m := range []*fixture.Member{c1, c2} {
			si := e.imported(m, "app", "ttl", 5*time.Second, "without cluster3", func(si *mcsv1beta1.ServiceImport) bool {
				return slices.Equal(clustersOf(si), []string{c1.ID})
			})
			if !slices.Equal(si.Spec.IPs, []string{ttlVIP}) {
				t.Fatalf("%s: the VIP changed to %v when cluster3 died", m.ID, si.Spec.IPs)
			}
			e.liveness(m, time.Second, "saying cluster3 is gone", func(s liveness.State) bool { return s.Clusters[c3.ID] == liveness.Gone })
			e.livenessEvent(m, liveness.EventClusterLeft)
			if v := metricValue(e.importers[m.ID].Registry, "mcsd_importer_cluster_dropped_total", map[string]string{"cluster": c3.ID}); v < 1 {
				t.Fatalf("%s: cluster_dropped_total{cluster3} = %v", m.ID, v)
			}
		}
		// cluster3 still serves its own endpoints to itself.
		e.endpointsBySource(c3, "app", "ttl", 5*time.Second, both)

		lease, err := cs.Broker.Kube.CoordinationV1().Leases(c3.BrokerNamespace()).Get(ctx, record.LeaseName(c3.ID), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		e.startExporter(c3)
		var renewed time.Time
		err = wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, minute, true, func(ctx context.Context) (bool, error) {
			l, err := cs.Broker.Kube.CoordinationV1().Leases(c3.BrokerNamespace()).Get(ctx, record.LeaseName(c3.ID), metav1.GetOptions{})
			renewed = time.Now()
			return err == nil && l.ResourceVersion != lease.ResourceVersion, nil
		})
		if err != nil {
			t.Fatal("cluster3's restarted heartbeat never renewed its Lease")
		}
		for _, m := range []*fixture.Member{c1, c2} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				e.endpointsBySource(m, "app", "ttl", 2*time.Second-time.Since(renewed), both)
				mu.Lock()
				took[m.ID] = time.Since(renewed)
				mu.Unlock()
			}()
		}
		wg.Wait()
		if t.Failed() {
			t.FailNow()
		}
		t.Logf("cluster3 renewed -> its endpoints back: %v in cluster1, %v in cluster2",
			took[c1.ID].Round(time.Millisecond), took[c2.ID].Round(time.Millisecond))
		for _, m := range []*fixture.Member{c1, c2} {
			e.imported(m, "app", "ttl", 5*time.Second, "with cluster3 again", func(si *mcsv1beta1.ServiceImport) bool {
				return slices.Equal(clustersOf(si), []string{c1.ID, c3.ID})
			})
			e.liveness(m, time.Second, "saying cluster3 is live", func(s liveness.State) bool { return s.Clusters[c3.ID] == liveness.Live })
			e.livenessEvent(m, liveness.EventClusterBack)
		}
	})

	t.Run("step 11: a broker down for 30 s deletes nothing, says why, and everything converges after", func(t *testing.T) {
		e.t = t
		e.service(c2, "app", "steady", false, nil)
		e.export(c2, "app", "steady", nil)
		for _, m := range members {
			e.imported(m, "app", "steady", minute, "ready", func(si *mcsv1beta1.ServiceImport) bool { return readyIs(si, metav1.ConditionTrue, "Ready") })
			// Its slice (no endpoints: no pod) may be written just after the
			// ServiceImport is Ready; the snapshot below must hold it.
			e.endpointsBySource(m, "app", "steady", minute, map[string][]string{c2.ID: {}})
		}
		type snapshot map[string]string // object name -> UID
		take := func(m *fixture.Member) snapshot {
			s := snapshot{}
			imports, err := m.MCS.MulticlusterV1beta1().ServiceImports("app").List(ctx, metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			for _, si := range imports.Items {
				// An outage changes nothing about a service: not one write.
				s["serviceimport/"+si.Name] = string(si.UID) + "@" + si.ResourceVersion
			}
			list, err := m.Kube.DiscoveryV1().EndpointSlices("app").List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelManagedBy + "=" + mcsslice.Manager})
			if err != nil {
				t.Fatal(err)
			}
			for _, es := range list.Items {
				s["endpointslice/"+es.Name] = string(es.UID)
			}
			return s
		}
		before := map[string]snapshot{}
		for _, m := range members {
			before[m.ID] = take(m)
		}

		cs.Broker.StopAPIServer()
		began := time.Now()
		// A change the importers can only learn of when the broker is back.
		e.unexport(c2, "app", "steady")
		for _, m := range members {
			st := e.liveness(m, 20*time.Second, "saying the broker is unreachable", func(s liveness.State) bool { return !s.BrokerReachable })
			t.Logf("%s: broker unreachable since %v", m.ID, st.BrokerLastContact)
			if v := metricValue(e.importers[m.ID].Registry, "mcsd_importer_broker_reachable", nil); v != 0 {
				t.Fatalf("%s: broker_reachable = %v during the outage", m.ID, v)
			}
			e.livenessEvent(m, liveness.EventBrokerUnreachable)
		}
		if err := hold.For(ctx, 30*time.Second-time.Since(began), time.Second, func(context.Context) error {
			for _, m := range members {
				if now := take(m); !apiequality.Semantic.DeepEqual(now, before[m.ID]) {
					return fmt.Errorf("%s: local imports changed while the broker was down: %v, was %v", m.ID, now, before[m.ID])
				}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		for _, m := range members {
			si := e.imported(m, "app", "ttl", 5*time.Second, "present", func(*mcsv1beta1.ServiceImport) bool { return true })
			if got := clustersOf(si); !slices.Equal(got, []string{c1.ID, c3.ID}) {
				t.Fatalf("%s: status.clusters %v after 30 s without the broker; nobody may be dropped", m.ID, got)
			}
		}
		if err := cs.Broker.StartAPIServer(ctx); err != nil {
			t.Fatal(err)
		}
		restarted := time.Now()
		for _, m := range members {
			e.imported(m, "app", "ttl", 2*minute, "ready again", func(si *mcsv1beta1.ServiceImport) bool {
				return readyIs(si, metav1.ConditionTrue, "Ready") && slices.Equal(clustersOf(si), []string{c1.ID, c3.ID})
			})
		}
		t.Logf("Ready again %v after the broker returned", time.Since(restarted).Round(time.Millisecond))
		for _, m := range members {
			e.gone(m, "app", "steady", 2*minute)
		}
		t.Logf("the unexport made during the outage reached every cluster %v after the broker returned", time.Since(restarted).Round(time.Millisecond))
		// The grace after the outage ends with every live cluster still live.
		want := map[string][]string{c1.ID: {ttlPods[c1.ID]}, c3.ID: {ttlPods[c3.ID]}}
		for _, m := range members {
			e.endpointsBySource(m, "app", "ttl", 5*time.Second, want)
		}
		if err := hold.For(ctx, clusterTTL+2*time.Second, 200*time.Millisecond, func(context.Context) error {
			for _, m := range members {
				if got, _ := e.bySource(m, "app", "ttl"); !apiequality.Semantic.DeepEqual(got, want) {
					return fmt.Errorf("%s: endpoints by source cluster %v, want %v", m.ID, got, want)
				}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		for _, m := range members {
			e.liveness(m, 5*time.Second, "saying the broker answers", func(s liveness.State) bool { return s.BrokerReachable })
			e.livenessEvent(m, liveness.EventBrokerReachable)
			if v := metricValue(e.importers[m.ID].Registry, "mcsd_importer_broker_reachable", nil); v != 1 {
				t.Fatalf("%s: broker_reachable = %v after the outage", m.ID, v)
			}
		}
	})
}
