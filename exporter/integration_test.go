package exporter_test

import (
	"context"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/mcsd-io/mcsd/internal/merge"
	"github.com/mcsd-io/mcsd/internal/record"
	"github.com/mcsd-io/mcsd/test/lib/fixture"
	"github.com/mcsd-io/mcsd/test/lib/harness"
)

type env struct {
	t       *testing.T
	ctx     context.Context
	cs      *harness.ClusterSet
	members []*fixture.Member
}

func (e *env) namespace(name string) {
	e.t.Helper()
	for _, m := range e.members {
		_, err := m.Kube.CoreV1().Namespaces().Create(e.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			e.t.Fatal(err)
		}
	}
}

func (e *env) service(m *fixture.Member, ns, name string, mutate func(*corev1.Service)) {
	e.t.Helper()
	svc := fixture.WebService(ns, name, name)
	if mutate != nil {
		mutate(svc)
	}
	if _, err := m.Kube.CoreV1().Services(ns).Create(e.ctx, svc, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) export(m *fixture.Member, ns, name string, mutate func(*mcsv1beta1.ServiceExport)) {
	e.t.Helper()
	se := &mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	if mutate != nil {
		mutate(se)
	}
	if _, err := m.MCS.MulticlusterV1beta1().ServiceExports(ns).Create(e.ctx, se, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

// condition waits until the export's condition has the given status and
// reason, and returns it.
func (e *env) condition(m *fixture.Member, ns, name, condType string, status metav1.ConditionStatus, reason string) metav1.Condition {
	e.t.Helper()
	var got *metav1.Condition
	err := wait.PollUntilContextTimeout(e.ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		se, err := m.MCS.MulticlusterV1beta1().ServiceExports(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		got = meta.FindStatusCondition(se.Status.Conditions, condType)
		return got != nil && got.Status == status && (reason == "" || got.Reason == reason), nil
	})
	if err != nil {
		e.t.Fatalf("%s: ServiceExport %s/%s condition %s = %+v, want %s/%s", m.ID, ns, name, condType, got, status, reason)
	}
	return *got
}

// records waits until the broker holds records of the service from exactly
// the given clusters and returns them decoded.
func (e *env) records(ns, name string, clusters ...string) map[string]record.Export {
	e.t.Helper()
	slices.Sort(clusters)
	var out map[string]record.Export
	var seen []string
	err := wait.PollUntilContextTimeout(e.ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := e.cs.Broker.MCS.MulticlusterV1beta1().ServiceImports(metav1.NamespaceAll).List(ctx, metav1.ListOptions{LabelSelector: record.ServiceSelector(ns, name).String()})
		if err != nil {
			return false, nil
		}
		out = map[string]record.Export{}
		seen = nil
		for i := range list.Items {
			r, err := record.Decode(&list.Items[i])
			if err != nil {
				return false, err
			}
			out[r.Cluster] = r
			seen = append(seen, r.Cluster)
		}
		slices.Sort(seen)
		return slices.Equal(seen, clusters), nil
	})
	if err != nil {
		e.t.Fatalf("broker records of %s/%s from %v, want from %v: %v", ns, name, seen, clusters, err)
	}
	return out
}

func TestExporterAgainstABrokerAndThreeClusters(t *testing.T) {
	cs := harness.Start(t, harness.Options{Clusters: 3})
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	members := fixture.Join(t, cs)
	for _, m := range members {
		fixture.StartExporter(t, m, fixture.ExporterOptions{})
	}
	e := &env{t: t, ctx: ctx, cs: cs, members: members}
	c1, c2, c3 := members[0], members[1], members[2]
	e.namespace("app")

	t.Run("step 1: a ServiceExport without a Service is not Valid (NoService)", func(t *testing.T) {
		e.t = t
		e.export(c1, "app", "ghost", nil)
		e.condition(c1, "app", "ghost", "Valid", metav1.ConditionFalse, "NoService")
		e.condition(c1, "app", "ghost", "Ready", metav1.ConditionFalse, "Failed")
		e.records("app", "ghost")
	})

	t.Run("step 2: an ExternalName Service is not Valid (InvalidServiceType) and stays off the broker", func(t *testing.T) {
		e.t = t
		e.service(c1, "app", "external", func(s *corev1.Service) {
			s.Spec = corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "example.invalid"}
		})
		e.export(c1, "app", "external", nil)
		e.condition(c1, "app", "external", "Valid", metav1.ConditionFalse, "InvalidServiceType")
		e.records("app", "external")
	})

	t.Run("step 3: NodePort and LoadBalancer Services export as ClusterSetIP with a VIP and their endpoints", func(t *testing.T) {
		e.t = t
		node, err := c1.AddNode(ctx)
		if err != nil {
			t.Fatal(err)
		}
		pod, err := node.AddPod(ctx, harness.PodSpec{Namespace: "app", Name: "np-0", Labels: map[string]string{"app": "np"}})
		if err != nil {
			t.Fatal(err)
		}
		e.service(c1, "app", "np", func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeNodePort })
		e.service(c1, "app", "lb", func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeLoadBalancer })
		e.export(c1, "app", "np", nil)
		e.export(c1, "app", "lb", nil)
		for _, name := range []string{"np", "lb"} {
			e.condition(c1, "app", name, "Valid", metav1.ConditionTrue, "Valid")
			e.condition(c1, "app", name, "Ready", metav1.ConditionTrue, "Exported")
			e.condition(c1, "app", name, "Conflict", metav1.ConditionFalse, "NoConflicts")
			r := e.records("app", name, c1.ID)[c1.ID]
			if r.Type != mcsv1beta1.ClusterSetIP || len(r.VIPs) != 1 || !c1.Blocks[corev1.IPv4Protocol].Contains(mustAddr(t, r.VIPs[0])) {
				t.Fatalf("%s record: type %s, VIPs %v; want ClusterSetIP with a VIP from %s", name, r.Type, r.VIPs, c1.Blocks[corev1.IPv4Protocol])
			}
			if len(r.Ports) != 1 || r.Ports[0].Port != 80 {
				t.Fatalf("%s record ports %+v", name, r.Ports)
			}
		}
		err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			list, err := cs.Broker.Kube.DiscoveryV1().EndpointSlices(c1.BrokerNamespace()).List(ctx, metav1.ListOptions{LabelSelector: record.ClusterServiceSelector(c1.ID, "app", "np").String()})
			if err != nil || len(list.Items) != 1 || len(list.Items[0].Endpoints) != 1 {
				return false, nil
			}
			s := list.Items[0]
			ep := s.Endpoints[0]
			return ep.Addresses[0] == pod.IP.String() && ptr.Deref(ep.Conditions.Ready, false) &&
				s.Labels[discoveryv1.LabelServiceName] == "" && s.Labels[mcsv1beta1.LabelSourceCluster] == c1.ID &&
				ptr.Deref(s.Ports[0].Port, 0) == 8080, nil
		})
		if err != nil {
			t.Fatalf("the broker never got cluster1's endpoint %s of app/np: %v", pod.IP, err)
		}
	})

	t.Run("step 4: deleting the Service withdraws the export and says NoService", func(t *testing.T) {
		e.t = t
		if err := c1.Kube.CoreV1().Services("app").Delete(ctx, "lb", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		e.condition(c1, "app", "lb", "Valid", metav1.ConditionFalse, "NoService")
		e.records("app", "lb")
	})

	t.Run("step 5: deleting the ServiceExport withdraws the record and its slices", func(t *testing.T) {
		e.t = t
		if err := c1.MCS.MulticlusterV1beta1().ServiceExports("app").Delete(ctx, "np", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		e.records("app", "np")
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			list, err := cs.Broker.Kube.DiscoveryV1().EndpointSlices(metav1.NamespaceAll).List(ctx, metav1.ListOptions{LabelSelector: record.ServiceSelector("app", "np").String()})
			return err == nil && len(list.Items) == 0, nil
		})
		if err != nil {
			t.Fatal("broker slices of app/np survived the unexport")
		}
	})

	// Conflicts: cluster1 exports first (and wins ties by ID), cluster2 second.
	conflict := func(t *testing.T, name string, first, second func(*corev1.Service), exportFirst, exportSecond func(*mcsv1beta1.ServiceExport), reason string) (record.Export, metav1.Condition) {
		e.t = t
		e.service(c1, "app", name, first)
		e.export(c1, "app", name, exportFirst)
		e.records("app", name, c1.ID)
		e.service(c2, "app", name, second)
		e.export(c2, "app", name, exportSecond)
		var cond metav1.Condition
		for _, m := range []*fixture.Member{c1, c2} {
			cond = e.condition(m, "app", name, "Conflict", metav1.ConditionTrue, "")
			if !strings.Contains(cond.Reason, reason) {
				t.Fatalf("%s: Conflict reason %q, want %s", m.ID, cond.Reason, reason)
			}
			if !strings.Contains(cond.Message, c1.ID) {
				t.Fatalf("%s: Conflict message %q does not name the winning cluster %s", m.ID, cond.Message, c1.ID)
			}
		}
		return e.records("app", name, c1.ID, c2.ID)[c1.ID], cond
	}

	t.Run("step 6: an added SCTP port is a union and a PortConflict on both exports", func(t *testing.T) {
		conflict(t, "ports", nil, func(s *corev1.Service) {
			s.Spec.Ports = append(s.Spec.Ports, corev1.ServicePort{Name: "sctp", Port: 9999, Protocol: corev1.ProtocolSCTP, TargetPort: intstr.FromInt32(9999)})
		}, nil, nil, "PortConflict")
	})

	t.Run("step 7: the same port name with another number is a PortConflict, the oldest's number kept", func(t *testing.T) {
		conflict(t, "portnumber", nil, func(s *corev1.Service) { s.Spec.Ports[0].Port = 8081 }, nil, nil, "PortConflict")
		var all []record.Export
		for _, r := range e.records("app", "portnumber", c1.ID, c2.ID) {
			all = append(all, r)
		}
		res, err := merge.Merge(all)
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Spec.Ports) != 1 || res.Spec.Ports[0].Name != "http" || res.Spec.Ports[0].Port != 80 {
			t.Fatalf("merged ports %+v, want only http on cluster1's 80", res.Spec.Ports)
		}
	})

	t.Run("step 8: headless against ClusterIP is a TypeConflict on both; the oldest's type wins", func(t *testing.T) {
		first, _ := conflict(t, "kind", func(s *corev1.Service) { s.Spec.ClusterIP = corev1.ClusterIPNone }, nil, nil, nil, "TypeConflict")
		if first.Type != mcsv1beta1.Headless {
			t.Fatalf("oldest record type %s", first.Type)
		}
		// The loser is still Valid: it is exportable, just outvoted.
		e.condition(c2, "app", "kind", "Valid", metav1.ConditionTrue, "Valid")
	})

	t.Run("step 9: a session affinity disagreement is a SessionAffinityConflict", func(t *testing.T) {
		conflict(t, "affinity", func(s *corev1.Service) { s.Spec.SessionAffinity = corev1.ServiceAffinityClientIP }, nil, nil, nil, "SessionAffinityConflict")
	})

	t.Run("step 10: exported labels and annotations that disagree are conflicts", func(t *testing.T) {
		conflict(t, "labels", nil, nil,
			func(se *mcsv1beta1.ServiceExport) {
				se.Spec.ExportedLabels = map[string]string{"tier": "gold"}
				se.Spec.ExportedAnnotations = map[string]string{"owner": "a"}
			},
			func(se *mcsv1beta1.ServiceExport) {
				se.Spec.ExportedLabels = map[string]string{"tier": "silver"}
				se.Spec.ExportedAnnotations = map[string]string{"owner": "b"}
			}, "LabelsConflict")
		cond := e.condition(c2, "app", "labels", "Conflict", metav1.ConditionTrue, "")
		if !strings.Contains(cond.Reason, "AnnotationsConflict") {
			t.Fatalf("reason %q lacks AnnotationsConflict", cond.Reason)
		}
	})

	t.Run("step 11: every exporter of a service holds the same VIP", func(t *testing.T) {
		e.t = t
		e.service(c3, "app", "ports", nil)
		e.export(c3, "app", "ports", nil)
		var recs map[string]record.Export
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			recs = e.records("app", "ports", c1.ID, c2.ID, c3.ID)
			v := recs[c1.ID].VIPs
			return len(v) == 1 && slices.Equal(recs[c2.ID].VIPs, v) && slices.Equal(recs[c3.ID].VIPs, v), nil
		})
		if err != nil {
			t.Fatalf("VIPs differ: %v %v %v", recs[c1.ID].VIPs, recs[c2.ID].VIPs, recs[c3.ID].VIPs)
		}
	})

	t.Run("step 12: a broker down for 30 s while exports change ends with exactly the right records", func(t *testing.T) {
		e.t = t
		e.service(c1, "app", "steady", nil)
		e.export(c1, "app", "steady", nil)
		e.records("app", "steady", c1.ID)

		cs.Broker.StopAPIServer()
		began := time.Now()
		e.service(c2, "app", "during", nil)
		e.export(c2, "app", "during", nil)
		if err := c1.MCS.MulticlusterV1beta1().ServiceExports("app").Delete(ctx, "steady", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		svc, err := c3.Kube.CoreV1().Services("app").Get(ctx, "ports", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		svc.Spec.Ports = append(svc.Spec.Ports, corev1.ServicePort{Name: "extra", Port: 7070, Protocol: corev1.ProtocolUDP, TargetPort: intstr.FromInt32(7070)})
		if _, err := c3.Kube.CoreV1().Services("app").Update(ctx, svc, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		e.condition(c2, "app", "during", "Ready", metav1.ConditionFalse, "Failed")
		time.Sleep(30*time.Second - time.Since(began))
		if err := cs.Broker.StartAPIServer(ctx); err != nil {
			t.Fatal(err)
		}
		restarted := time.Now()
		e.records("app", "during", c2.ID)
		e.condition(c2, "app", "during", "Ready", metav1.ConditionTrue, "Exported")
		e.records("app", "steady")
		err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			r := e.records("app", "ports", c1.ID, c2.ID, c3.ID)[c3.ID]
			return len(r.Ports) == 2, nil
		})
		if err != nil {
			t.Fatal("cluster3's port change made during the outage never reached the broker")
		}
		t.Logf("converged %v after the broker returned", time.Since(restarted).Round(time.Millisecond))
	})
}

func mustAddr(t *testing.T, s string) netip.Addr {
	t.Helper()
	a, err := netip.ParseAddr(s)
	if err != nil {
		t.Fatal(err)
	}
	return a
}
