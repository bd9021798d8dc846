package exporter

import (
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/mcsd-io/mcsd/broker"
	"github.com/mcsd-io/mcsd/internal/merge"
	"github.com/mcsd-io/mcsd/internal/record"
)

const (
	conditionValid    = string(mcsv1beta1.ServiceExportConditionValid)
	conditionReady    = string(mcsv1beta1.ServiceExportConditionReady)
	conditionConflict = string(mcsv1beta1.ServiceExportConditionConflict)
)

func TestSyncDecidesWhetherAndHowAServiceIsExported(t *testing.T) {
	for _, tc := range []struct {
		name        string
		objects     []runtime.Object
		validReason mcsv1beta1.ServiceExportConditionReason
		message     string // part of the Valid message
		recordType  mcsv1beta1.ServiceImportType
	}{
		{
			name:        "an export without a Service is not valid and writes no record",
			objects:     []runtime.Object{serviceExport(nil)},
			validReason: mcsv1beta1.ServiceExportReasonNoService,
			message:     "Service shop/cart does not exist",
		},
		{
			name:        "an ExternalName Service is not valid and writes no record",
			objects:     []runtime.Object{serviceExport(nil), service(corev1.ServiceTypeExternalName, "")},
			validReason: mcsv1beta1.ServiceExportReasonInvalidServiceType,
			message:     "ExternalName, which cannot be exported",
		},
		{
			name:        "a ClusterIP Service exports as ClusterSetIP",
			objects:     []runtime.Object{serviceExport(nil), clusterIPService()},
			validReason: mcsv1beta1.ServiceExportReasonValid,
			recordType:  mcsv1beta1.ClusterSetIP,
		},
		{
			name:        "a headless Service exports as Headless",
			objects:     []runtime.Object{serviceExport(nil), service(corev1.ServiceTypeClusterIP, corev1.ClusterIPNone)},
			validReason: mcsv1beta1.ServiceExportReasonValid,
			recordType:  mcsv1beta1.Headless,
		},
		{
			name:        "a NodePort Service exports as ClusterSetIP",
			objects:     []runtime.Object{serviceExport(nil), service(corev1.ServiceTypeNodePort, "10.96.0.11")},
			validReason: mcsv1beta1.ServiceExportReasonValid,
			recordType:  mcsv1beta1.ClusterSetIP,
		},
		{
			name:        "a LoadBalancer Service exports as ClusterSetIP",
			objects:     []runtime.Object{serviceExport(nil), service(corev1.ServiceTypeLoadBalancer, "10.96.0.12")},
			validReason: mcsv1beta1.ServiceExportReasonValid,
			recordType:  mcsv1beta1.ClusterSetIP,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, nil)
			f.add(tc.objects...)
			f.add(localSlice("cart-abcde", "10.0.0.1"))
			f.mustSync()

			w := f.writes()
			conds := f.conditions()
			si := f.ownRecord()
			if tc.recordType == "" {
				valid := wantCondition(t, conds, conditionValid, metav1.ConditionFalse, string(tc.validReason))
				wantMessage(t, valid.Message, tc.message)
				ready := wantCondition(t, conds, conditionReady, metav1.ConditionFalse, string(mcsv1beta1.ServiceExportReasonFailed))
				wantMessage(t, ready.Message, "Not exported: ", tc.message)
				wantNoCondition(t, conds, conditionConflict)
				if si != nil {
					t.Fatalf("an invalid export wrote the record %s", si.Name)
				}
				if s := f.ownSlices(); len(s) > 0 {
					t.Fatalf("an invalid export wrote %d broker EndpointSlices", len(s))
				}
				if !slices.Equal(w, []string{"update serviceexports/status cart"}) {
					t.Fatalf("writes %q, want only the status", w)
				}
				return
			}
			wantCondition(t, conds, conditionValid, metav1.ConditionTrue, string(tc.validReason))
			wantCondition(t, conds, conditionReady, metav1.ConditionTrue, string(mcsv1beta1.ServiceExportReasonExported))
			wantCondition(t, conds, conditionConflict, metav1.ConditionFalse, string(mcsv1beta1.ServiceExportReasonNoConflicts))
			wantNoCondition(t, conds, ConditionClusterSetIP)
			if si == nil {
				t.Fatal("no broker record")
			}
			if si.Spec.Type != tc.recordType {
				t.Fatalf("record type %q, want %q", si.Spec.Type, tc.recordType)
			}
			if len(si.Spec.IPs) > 0 {
				t.Fatalf("record IPs %v with ClusterSetIPs off", si.Spec.IPs)
			}
			if s := f.ownSlices(); len(s) != 1 {
				t.Fatalf("%d broker EndpointSlices, want 1", len(s))
			}
		})
	}
}

func TestSyncWritesThisClustersRecordAndSlices(t *testing.T) {
	f := newFixture(t, nil)
	svc := clusterIPService()
	svc.Spec.Ports = append(svc.Spec.Ports, corev1.ServicePort{Name: "dns", Protocol: corev1.ProtocolUDP, Port: 53})
	svc.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
	svc.Spec.InternalTrafficPolicy = ptr.To(corev1.ServiceInternalTrafficPolicyLocal)
	f.add(
		serviceExport(func(se *mcsv1beta1.ServiceExport) {
			se.Spec.ExportedLabels = map[string]string{"tier": "frontend"}
			se.Spec.ExportedAnnotations = map[string]string{"example.com/owner": "team-cart"}
		}),
		svc,
		// Two slices of the core controller, one address in both (it is
		// moving), and a slice of another Service that is not exported.
		localSlice("cart-b", "10.0.0.2", "10.0.0.1"),
		localSlice("cart-a", "10.0.0.3", "10.0.0.2"),
		func() *discoveryv1.EndpointSlice {
			s := localSlice("other-a", "10.0.9.9")
			s.Labels[discoveryv1.LabelServiceName] = "other"
			return s
		}(),
	)
	f.mustSync()

	w := f.writes()
	slices.Sort(w)
	if want := []string{
		"create endpointslices shop.cart.east.ipv4-0",
		"create serviceimports shop.cart.east",
		"update serviceexports/status cart",
	}; !slices.Equal(w, want) {
		t.Fatalf("writes %q, want %q", w, want)
	}

	t.Run("the record is this cluster's view of the Service", func(t *testing.T) {
		si := f.ownRecord()
		if si == nil {
			t.Fatal("no broker record")
		}
		if si.Namespace != testOwnNS || si.Name != "shop.cart.east" {
			t.Fatalf("record %s/%s, want %s/shop.cart.east", si.Namespace, si.Name, testOwnNS)
		}
		if si.Labels[record.LabelSourceCluster] != testCluster {
			t.Fatalf("record labels %v, want source cluster %q", si.Labels, testCluster)
		}
		got, err := record.Decode(si)
		if err != nil {
			t.Fatal(err)
		}
		want := record.Export{
			Cluster: testCluster, Namespace: testNamespace, Name: testName, Created: exportCreated,
			Type: mcsv1beta1.ClusterSetIP,
			Ports: []mcsv1beta1.ServicePort{
				{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80},
				{Name: "dns", Protocol: corev1.ProtocolUDP, Port: 53},
			},
			SessionAffinity:       corev1.ServiceAffinityClientIP,
			IPFamilies:            []corev1.IPFamily{corev1.IPv4Protocol},
			InternalTrafficPolicy: ptr.To(corev1.ServiceInternalTrafficPolicyLocal),
			ExportedLabels:        map[string]string{"tier": "frontend"},
			ExportedAnnotations:   map[string]string{"example.com/owner": "team-cart"},
			ClusterSetIPDisabled:  true,
		}
		if !record.Equal(got, want) {
			t.Fatalf("record says\n%+v\nwant\n%+v", got, want)
		}
	})

	t.Run("the broker slice holds the endpoints of every local slice once", func(t *testing.T) {
		got := f.ownSlices()
		if len(got) != 1 {
			t.Fatalf("%d broker EndpointSlices, want 1", len(got))
		}
		s := got[0]
		if !apiequality.Semantic.DeepEqual(s.Labels, record.EndpointSliceLabels(testCluster, testNamespace, testName)) {
			t.Fatalf("slice labels %v", s.Labels)
		}
		if _, ok := s.Labels[discoveryv1.LabelServiceName]; ok {
			t.Fatal("a broker slice carries kubernetes.io/service-name, so kube-proxy would take it for a Service's")
		}
		var addrs []string
		for _, ep := range s.Endpoints {
			addrs = append(addrs, ep.Addresses...)
			if ep.TargetRef != nil || ep.NodeName != nil || ep.Zone != nil {
				t.Fatalf("endpoint %s names this cluster's objects: %+v", ep.Addresses[0], ep)
			}
		}
		if want := []string{"10.0.0.1", "10.0.0.2", "10.0.0.3"}; !slices.Equal(addrs, want) {
			t.Fatalf("addresses %v, want %v", addrs, want)
		}
		if want := normalizePorts(localSlice("x").Ports); !apiequality.Semantic.DeepEqual(s.Ports, want) {
			t.Fatalf("ports %+v, want %+v", s.Ports, want)
		}
	})
}

func TestSyncWithNothingChangedWritesNothing(t *testing.T) {
	for _, tc := range []struct {
		name      string
		configure func(*Config)
		objects   []runtime.Object
	}{
		{"an exported ClusterIP Service", nil,
			[]runtime.Object{serviceExport(nil), clusterIPService(), localSlice("cart-a", "10.0.0.1", "10.0.0.2")}},
		{"an exported ClusterIP Service with a ClusterSetIP", withVIPs(allocator("243.1.0.0/16")),
			[]runtime.Object{serviceExport(nil), clusterIPService(), localSlice("cart-a", "10.0.0.1")}},
		{"an exported headless Service without endpoints", nil,
			[]runtime.Object{serviceExport(nil), service(corev1.ServiceTypeClusterIP, corev1.ClusterIPNone)}},
		{"an export in conflict with an older one", nil,
			[]runtime.Object{serviceExport(nil), clusterIPService(), otherRecord("west", exportCreated.Add(-time.Hour), func(e *record.Export) {
				e.Type = mcsv1beta1.Headless
			})}},
		{"an export without a Service", nil, []runtime.Object{serviceExport(nil)}},
		{"an export of an ExternalName Service", nil,
			[]runtime.Object{serviceExport(nil), service(corev1.ServiceTypeExternalName, "")}},
	} {
		t.Run("a second sync of "+tc.name+" writes nothing", func(t *testing.T) {
			f := newFixture(t, tc.configure)
			f.add(tc.objects...)
			f.mustSync()
			if len(f.writes()) == 0 {
				t.Fatal("the first sync wrote nothing")
			}
			f.settle()
			f.mustSync()
			if w := f.writes(); len(w) > 0 {
				t.Fatalf("an unchanged sync wrote %q", w)
			}
			if e := f.event(); e != "" {
				t.Fatalf("an unchanged sync recorded the event %q", e)
			}
		})
	}
}

func TestSyncWithdrawsWhatIsNoLongerExported(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(f *fixture)
		status bool // the export remains and reports why it is not exported
	}{
		{"deleting the ServiceExport withdraws the record and slices", func(f *fixture) {
			f.check(f.localMCS.Tracker().Delete(mcsv1beta1.SchemeGroupVersion.WithResource("serviceexports"), testNamespace, testName))
		}, false},
		{"a ServiceExport being deleted withdraws the record and slices", func(f *fixture) {
			se := serviceExport(func(se *mcsv1beta1.ServiceExport) {
				se.DeletionTimestamp = ptr.To(metav1.NewTime(exportCreated.Add(time.Hour)))
				se.Finalizers = []string{"example.com/hold"}
			})
			f.check(f.localMCS.Tracker().Update(mcsv1beta1.SchemeGroupVersion.WithResource("serviceexports"), se, testNamespace))
		}, false},
		{"deleting the Service withdraws the record and slices", func(f *fixture) {
			f.check(f.local.Tracker().Delete(corev1.SchemeGroupVersion.WithResource("services"), testNamespace, testName))
		}, true},
		{"the Service turning ExternalName withdraws the record and slices", func(f *fixture) {
			f.check(f.local.Tracker().Update(corev1.SchemeGroupVersion.WithResource("services"), service(corev1.ServiceTypeExternalName, ""), testNamespace))
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, nil)
			f.add(serviceExport(nil), clusterIPService(), localSlice("cart-a", "10.0.0.1"),
				otherRecord("west", exportCreated.Add(-time.Hour), nil))
			f.mustSync()
			f.settle()
			tc.change(f)
			f.settle()
			f.mustSync()

			w := f.writes()
			slices.Sort(w)
			want := []string{"delete endpointslices shop.cart.east.ipv4-0", "delete serviceimports shop.cart.east"}
			if tc.status {
				want = append(want, "update serviceexports/status cart")
			}
			if !slices.Equal(w, want) {
				t.Fatalf("writes %q, want %q", w, want)
			}
			if si := f.ownRecord(); si != nil {
				t.Fatalf("record %s is still on the broker", si.Name)
			}
			if s := f.ownSlices(); len(s) > 0 {
				t.Fatalf("%d broker EndpointSlices are still on the broker", len(s))
			}
			if _, err := f.brokerMCS.MulticlusterV1beta1().ServiceImports(record.MemberNamespace(testBrokerNS, "west")).Get(f.ctx, "shop.cart.west", metav1.GetOptions{}); err != nil {
				t.Fatalf("another cluster's record went too: %v", err)
			}
		})
	}
}

func TestSyncKeepsTheBrokerInStepWithTheCluster(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(f *fixture)
		want   []string
		check  func(t *testing.T, f *fixture)
	}{
		{
			name:   "a new local endpoint updates the broker slice in place",
			change: func(f *fixture) { f.add(localSlice("cart-b", "10.0.0.7")) },
			want:   []string{"update endpointslices shop.cart.east.ipv4-0"},
			check: func(t *testing.T, f *fixture) {
				if n := len(f.ownSlices()[0].Endpoints); n != 2 {
					t.Fatalf("%d endpoints, want 2", n)
				}
			},
		},
		{
			name: "a broker slice someone else changed is repaired",
			change: func(f *fixture) {
				s := f.ownSlices()[0]
				s.Endpoints = nil
				s.Labels[record.LabelManagedBy] = "someone-else"
				f.check(f.broker.Tracker().Update(discoveryv1.SchemeGroupVersion.WithResource("endpointslices"), &s, testOwnNS))
				f.settle()
			},
			want: []string{"update endpointslices shop.cart.east.ipv4-0"},
			check: func(t *testing.T, f *fixture) {
				s := f.ownSlices()[0]
				if len(s.Endpoints) != 1 || s.Labels[record.LabelManagedBy] != record.EndpointSliceManager {
					t.Fatalf("slice not repaired: %d endpoints, labels %v", len(s.Endpoints), s.Labels)
				}
			},
		},
		{
			name: "a broker slice someone else deleted is written again",
			change: func(f *fixture) {
				f.check(f.broker.Tracker().Delete(discoveryv1.SchemeGroupVersion.WithResource("endpointslices"), testOwnNS, "shop.cart.east.ipv4-0"))
				f.settle()
			},
			want: []string{"create endpointslices shop.cart.east.ipv4-0"},
		},
		{
			name: "a stale broker slice the cache has not seen yet is read and brought up to date",
			change: func(f *fixture) {
				s := f.ownSlices()[0]
				s.Endpoints = nil
				f.check(f.broker.Tracker().Update(discoveryv1.SchemeGroupVersion.WithResource("endpointslices"), &s, testOwnNS))
				inf := f.brokerInf.OwnSlices()
				f.check(inf.GetIndexer().Delete(&s))
				f.clearActions()
			},
			want: []string{"create endpointslices shop.cart.east.ipv4-0", "get endpointslices", "update endpointslices shop.cart.east.ipv4-0"},
			check: func(t *testing.T, f *fixture) {
				if s := f.ownSlices()[0]; len(s.Endpoints) != 1 {
					t.Fatalf("the stale slice was left as it was: %d endpoints, want 1", len(s.Endpoints))
				}
			},
		},
		{
			name: "a broker slice of a family the cluster no longer has is deleted",
			change: func(f *fixture) {
				s := brokerSlices(testCluster, testNamespace, testName, []*discoveryv1.EndpointSlice{localSlice("x", "10.0.0.1")})[0]
				s.Namespace, s.Name = testOwnNS, "shop.cart.east.ipv6-0"
				f.add(s)
			},
			want: []string{"delete endpointslices shop.cart.east.ipv6-0"},
		},
		{
			name: "a changed Service port updates the record in place",
			change: func(f *fixture) {
				svc := clusterIPService()
				svc.Spec.Ports[0].Port = 8000
				f.check(f.local.Tracker().Update(corev1.SchemeGroupVersion.WithResource("services"), svc, testNamespace))
				f.settle()
			},
			want: []string{"update serviceimports shop.cart.east"},
			check: func(t *testing.T, f *fixture) {
				if p := f.ownRecord().Spec.Ports; len(p) != 1 || p[0].Port != 8000 {
					t.Fatalf("record ports %+v, want port 8000", p)
				}
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, nil)
			f.add(serviceExport(nil), clusterIPService(), localSlice("cart-a", "10.0.0.1"))
			f.mustSync()
			f.settle()
			tc.change(f)
			f.mustSync()
			if w := f.writes(); !slices.Equal(w, tc.want) {
				t.Fatalf("writes %q, want only %q", w, tc.want)
			}
			if tc.check != nil {
				tc.check(t, f)
			}
		})
	}
}

func TestSyncReportsHowThisExportMergesWithOthers(t *testing.T) {
	older, newer := exportCreated.Add(-time.Hour), exportCreated.Add(time.Hour)
	for _, tc := range []struct {
		name    string
		others  []runtime.Object
		status  metav1.ConditionStatus
		reason  string
		message []string
	}{
		{
			name:    "the only export has no conflict",
			status:  metav1.ConditionFalse,
			reason:  string(mcsv1beta1.ServiceExportReasonNoConflicts),
			message: []string{"this is the only export of the service"},
		},
		{
			name:    "a newer export alike has no conflict",
			others:  []runtime.Object{otherRecord("west", newer, nil)},
			status:  metav1.ConditionFalse,
			reason:  string(mcsv1beta1.ServiceExportReasonNoConflicts),
			message: []string{"No conflicts among the 2 exports"},
		},
		{
			name: "an older export whose port has another number is a port conflict",
			others: []runtime.Object{otherRecord("west", older, func(e *record.Export) {
				e.Ports[0].Port = 8080
			})},
			status:  metav1.ConditionTrue,
			reason:  string(mcsv1beta1.ServiceExportReasonPortConflict),
			message: []string{`"http"`, `"west"`, "1/2 clusters disagree"},
		},
		{
			name: "an older headless export is a type conflict that leaves this cluster out",
			others: []runtime.Object{otherRecord("west", older, func(e *record.Export) {
				e.Type = mcsv1beta1.Headless
			})},
			status:  metav1.ConditionTrue,
			reason:  string(mcsv1beta1.ServiceExportReasonTypeConflict),
			message: []string{`Using "Headless"`, "its endpoints are left out of the service"},
		},
		{
			name: "an older record the export rules keep out is ignored",
			others: []runtime.Object{
				otherRecord("west", older, func(e *record.Export) { e.Type = mcsv1beta1.Headless }),
				&corev1.ConfigMap{
					ObjectMeta: metav1.ObjectMeta{Namespace: testBrokerNS, Name: broker.ExportRuleName("shop"), Labels: map[string]string{broker.LabelExportRule: ""}},
					Data:       map[string]string{broker.ExportRuleNamespacesKey: testNamespace, broker.ExportRuleMembersKey: testCluster},
				},
			},
			status:  metav1.ConditionFalse,
			reason:  string(mcsv1beta1.ServiceExportReasonNoConflicts),
			message: []string{"this is the only export of the service"},
		},
		{
			name: "an older record being deleted is ignored",
			others: []runtime.Object{func() runtime.Object {
				si := otherRecord("west", older, func(e *record.Export) { e.Type = mcsv1beta1.Headless })
				si.DeletionTimestamp, si.Finalizers = ptr.To(metav1.Now()), []string{"example.com/keep"}
				return si
			}()},
			status:  metav1.ConditionFalse,
			reason:  string(mcsv1beta1.ServiceExportReasonNoConflicts),
			message: []string{"this is the only export of the service"},
		},
		{
			name: "a malformed record of another cluster is ignored",
			others: []runtime.Object{func() runtime.Object {
				si := otherRecord("west", older, func(e *record.Export) { e.Type = mcsv1beta1.Headless })
				si.Annotations[record.AnnotationFormat] = "99"
				return si
			}()},
			status:  metav1.ConditionFalse,
			reason:  string(mcsv1beta1.ServiceExportReasonNoConflicts),
			message: []string{"this is the only export of the service"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, nil)
			f.add(append([]runtime.Object{serviceExport(nil), clusterIPService()}, tc.others...)...)
			f.mustSync()
			conds := f.conditions()
			wantCondition(t, conds, conditionReady, metav1.ConditionTrue, string(mcsv1beta1.ServiceExportReasonExported))
			c := wantCondition(t, conds, conditionConflict, tc.status, tc.reason)
			wantMessage(t, c.Message, tc.message...)
			if c.ObservedGeneration != 1 {
				t.Fatalf("Conflict observedGeneration %d, want 1", c.ObservedGeneration)
			}
			// The record says this cluster's view even when another wins.
			if got := f.ownRecord(); got == nil || got.Spec.Type != mcsv1beta1.ClusterSetIP || got.Spec.Ports[0].Port != 80 {
				t.Fatalf("record %+v, want this cluster's ClusterSetIP export on port 80", got)
			}
		})
	}
}

// The conflict reported must be the merge's verdict, whatever it is.
func TestSyncReportsTheMergesVerdict(t *testing.T) {
	f := newFixture(t, nil)
	west := otherRecord("west", exportCreated.Add(-time.Hour), func(e *record.Export) {
		e.SessionAffinity = corev1.ServiceAffinityClientIP
		e.ExportedLabels = map[string]string{"tier": "backend"}
	})
	f.add(serviceExport(nil), clusterIPService(), west)
	f.mustSync()

	westExport, err := record.Decode(west)
	f.check(err)
	own, err := record.Decode(f.ownRecord())
	f.check(err)
	res, err := merge.Merge([]record.Export{westExport, own})
	f.check(err)
	v, _ := res.Verdict(testCluster)
	c := wantCondition(t, f.conditions(), conditionConflict, metav1.ConditionTrue, v.Reason())
	if c.Message != v.Message {
		t.Fatalf("Conflict message %q, want the verdict's %q", c.Message, v.Message)
	}
	if want := "SessionAffinityConflict,LabelsConflict"; v.Reason() != want {
		t.Fatalf("verdict reason %q, want %q", v.Reason(), want)
	}
}

func TestSyncBringsUpToDateWhatTheBrokerHasButTheCacheDoesNot(t *testing.T) {
	f := newFixture(t, nil)
	f.add(serviceExport(nil), clusterIPService(), localSlice("cart-a", "10.0.0.1"))
	// A record and a slice from before a restart, not cached yet and stale:
	// the Service had another port, the slice another address.
	stale := record.Export{
		Cluster: testCluster, Namespace: testNamespace, Name: testName, Created: exportCreated,
		Type:       mcsv1beta1.ClusterSetIP,
		Ports:      []mcsv1beta1.ServicePort{{Name: "old", Protocol: corev1.ProtocolTCP, Port: 8081}},
		IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol},
	}
	rec := record.Encode(stale)
	rec.Namespace = testOwnNS
	f.check(f.brokerMCS.Tracker().Add(rec))
	old := localSlice("ignored", "10.9.9.9")
	old.ObjectMeta = metav1.ObjectMeta{
		Namespace: testOwnNS,
		Name:      record.EndpointSliceName(testCluster, testNamespace, testName, discoveryv1.AddressTypeIPv4, 0),
		Labels:    record.EndpointSliceLabels(testCluster, testNamespace, testName),
	}
	f.check(f.broker.Tracker().Add(old))

	// The sync succeeds at once instead of failing until the cache catches up.
	f.mustSync()
	if got := f.ownRecord(); got == nil || len(got.Spec.Ports) != 1 || got.Spec.Ports[0].Port != 80 {
		t.Fatalf("broker record %+v, want the Service's port 80", got)
	}
	if got := f.ownSlices(); len(got) != 1 || len(got[0].Endpoints) != 1 || got[0].Endpoints[0].Addresses[0] != "10.0.0.1" {
		t.Fatalf("broker slices %+v, want the cluster's one endpoint 10.0.0.1", got)
	}
}
