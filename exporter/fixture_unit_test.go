package exporter

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	apitypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	kubefake "k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	kuberecord "k8s.io/client-go/tools/record"
	"k8s.io/utils/ptr"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
	mcsfake "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned/fake"

	"github.com/mcsd-io/mcsd/broker"
	"github.com/mcsd-io/mcsd/internal/caches"
	"github.com/mcsd-io/mcsd/internal/controller"
	"github.com/mcsd-io/mcsd/internal/record"
	"github.com/mcsd-io/mcsd/vipalloc"
)

// The service every unit test exports, from cluster "east".
const (
	testCluster  = "east"
	testBrokerNS = "mcsd-broker"
	// testOwnNS is the test cluster's own namespace on the broker.
	testOwnNS     = testBrokerNS + "-" + testCluster
	testNamespace = "shop"
	testName      = "cart"
	testKey       = testNamespace + "/" + testName
)

// testClaims are the ClusterSetIP blocks the test clusters own.
var testClaims = []struct{ cluster, block string }{
	{testCluster, "243.1.0.0/16"}, {"west", "243.2.0.0/16"}, {"north", "243.3.0.0/16"}, {"south", "243.4.0.0/16"},
	{testCluster, "fd7a:6d63:7364:1::/64"},
}

// exportCreated is when the test cluster's ServiceExport was created; the
// other clusters' records are made older or newer than it.
var exportCreated = metav1.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)

// fixture is an exporter on fake clientsets whose caches are filled from
// those clientsets by settle, never by running informers: a test calls sync
// directly and sees every write as a clientset action.
type fixture struct {
	t         *testing.T
	ctx       context.Context
	c         *Controller
	local     *kubefake.Clientset
	localMCS  *mcsfake.Clientset
	broker    *kubefake.Clientset
	brokerMCS *mcsfake.Clientset
	// localInf and brokerInf are the exporter's informers, never started.
	localInf  *caches.Local
	brokerInf *caches.Broker
	events    chan string
}

// newFixture builds the exporter of cluster "east"; configure, when set,
// changes its Config first (VIPs, allocators).
func newFixture(t *testing.T, configure func(*Config)) *fixture {
	t.Helper()
	f := &fixture{
		t:         t,
		ctx:       context.Background(),
		local:     kubefake.NewClientset(),
		localMCS:  mcsfake.NewSimpleClientset(),
		broker:    kubefake.NewClientset(),
		brokerMCS: mcsfake.NewSimpleClientset(),
		events:    make(chan string, 100),
	}
	cfg := Config{Shared: controller.Shared{
		ClusterID:       testCluster,
		BrokerNamespace: testBrokerNS,
		Local:           f.local,
		LocalMCS:        f.localMCS,
		Broker:          f.broker,
		BrokerMCS:       f.brokerMCS,
		Recorder:        &kuberecord.FakeRecorder{Events: f.events},
	}}
	if configure != nil {
		configure(&cfg)
	}
	f.localInf = caches.NewLocal(f.local, f.localMCS, 0, caches.LocalOptions{})
	f.brokerInf = caches.NewBroker(f.broker, f.brokerMCS, testBrokerNS, testCluster, 0)
	c, err := New(cfg, f.localInf, f.brokerInf)
	if err != nil {
		t.Fatal(err)
	}
	// Each test cluster owns the block its VIPs come from, as claimed on
	// the broker.
	for i, claim := range testClaims {
		p := netip.MustParsePrefix(claim.block)
		family := corev1.IPv4Protocol
		if p.Addr().Is6() {
			family = corev1.IPv6Protocol
		}
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
			Namespace: testBrokerNS, Name: vipalloc.ClaimName(claim.cluster, family), ResourceVersion: fmt.Sprint(i + 1),
			Labels: map[string]string{vipalloc.LabelClaim: "", mcsv1beta1.LabelSourceCluster: claim.cluster},
		}, Data: map[string]string{vipalloc.ClaimKey: claim.block}}
		if err := f.broker.Tracker().Add(cm); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(c.Queue.ShutDown)
	f.c = c
	return f
}

// withVIPs turns ClusterSetIPs on by default, with the given IPv4
// allocator.
func withVIPs(a *vipalloc.Allocator) func(*Config) {
	return func(cfg *Config) {
		cfg.ClusterSetIPs = true
		cfg.Allocators = map[corev1.IPFamily]*vipalloc.Allocator{corev1.IPv4Protocol: a}
	}
}

// allocator hands out addresses of block.
func allocator(block string) *vipalloc.Allocator {
	return vipalloc.NewAllocator(netip.MustParsePrefix(block))
}

// add stores objects in the fake API servers they belong to, as the
// informers would see them, and settles the caches.
func (f *fixture) add(objs ...runtime.Object) {
	f.t.Helper()
	for _, o := range objs {
		var err error
		switch o := o.(type) {
		case *mcsv1beta1.ServiceExport:
			err = f.localMCS.Tracker().Add(o)
		case *mcsv1beta1.ServiceImport:
			err = f.brokerMCS.Tracker().Add(o)
		case *corev1.Service:
			err = f.local.Tracker().Add(o)
		case *corev1.ConfigMap:
			err = f.broker.Tracker().Add(o)
		case *discoveryv1.EndpointSlice:
			if strings.HasPrefix(o.Namespace, testBrokerNS) {
				err = f.broker.Tracker().Add(o)
			} else {
				err = f.local.Tracker().Add(o)
			}
		default:
			f.t.Fatalf("the fixture does not know where a %T goes", o)
		}
		if err != nil {
			f.t.Fatal(err)
		}
	}
	f.settle()
}

// settle brings every cache up to date with the fake API servers, as the
// informers would once they caught up (record changes reach onRecord too),
// and then forgets the clientsets' actions, so that what a test counts is
// what sync writes.
func (f *fixture) settle() {
	f.t.Helper()
	ctx, c := f.ctx, f.c
	exports, err := f.localMCS.MulticlusterV1beta1().ServiceExports("").List(ctx, metav1.ListOptions{})
	f.check(err)
	services, err := f.local.CoreV1().Services("").List(ctx, metav1.ListOptions{})
	f.check(err)
	slices, err := f.local.DiscoveryV1().EndpointSlices("").List(ctx, metav1.ListOptions{})
	f.check(err)
	// The broker informers select as New's do.
	records, err := f.brokerMCS.MulticlusterV1beta1().ServiceImports(metav1.NamespaceAll).List(ctx,
		metav1.ListOptions{LabelSelector: record.LabelServiceNamespace})
	f.check(err)
	own, err := f.broker.DiscoveryV1().EndpointSlices(testOwnNS).List(ctx,
		metav1.ListOptions{LabelSelector: record.ClusterSelector(testCluster).String()})
	f.check(err)

	f.replace(f.localInf.Exports(), items(exports.Items))
	f.replace(f.localInf.Services(), items(services.Items))
	f.replace(f.localInf.EndpointSlices(), items(slices.Items))
	f.replace(f.brokerInf.OwnSlices(), items(own.Items))
	claims, err := f.broker.CoreV1().ConfigMaps(testBrokerNS).List(ctx, metav1.ListOptions{LabelSelector: vipalloc.LabelClaim})
	f.check(err)
	f.replace(f.brokerInf.Claims(), items(claims.Items))
	rules, err := f.broker.CoreV1().ConfigMaps(testBrokerNS).List(ctx, metav1.ListOptions{LabelSelector: broker.LabelExportRule})
	f.check(err)
	f.replace(f.brokerInf.ExportRules(), items(rules.Items))

	recordInf := f.brokerInf.RecordObjects()
	before := map[string]any{}
	for _, o := range recordInf.GetIndexer().List() {
		before[o.(*mcsv1beta1.ServiceImport).Name] = o
	}
	after := items(records.Items)
	f.replace(recordInf, after)
	for _, o := range after {
		name := o.(*mcsv1beta1.ServiceImport).Name
		if old, ok := before[name]; !ok {
			c.onRecord(nil, o)
		} else if !apiequality.Semantic.DeepEqual(old, o) {
			c.onRecord(old, o)
		}
		delete(before, name)
	}
	for _, old := range before {
		c.onRecord(old, nil)
	}
	f.clearActions()
}

func (f *fixture) replace(inf cache.SharedIndexInformer, objs []any) {
	f.t.Helper()
	f.check(inf.GetIndexer().Replace(objs, ""))
}

// items turns a list's items into pointers for an indexer.
func items[T any](list []T) []any {
	out := make([]any, len(list))
	for i := range list {
		out[i] = &list[i]
	}
	return out
}

func (f *fixture) check(err error) {
	f.t.Helper()
	if err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) clearActions() {
	f.local.ClearActions()
	f.localMCS.ClearActions()
	f.broker.ClearActions()
	f.brokerMCS.ClearActions()
	for len(f.events) > 0 {
		<-f.events
	}
}

// sync runs one sync of the test service.
func (f *fixture) sync() error {
	return f.c.sync(f.ctx, testNamespace, testName)
}

// mustSync runs one sync of the test service, which must succeed.
func (f *fixture) mustSync() {
	f.t.Helper()
	if err := f.sync(); err != nil {
		f.t.Fatalf("sync: %v", err)
	}
}

// writes lists the clientsets' actions since the last settle, as
// "verb resource name" (the name of what a create writes too).
func (f *fixture) writes() []string {
	var out []string
	for _, cs := range []interface{ Actions() []clienttesting.Action }{f.local, f.localMCS, f.broker, f.brokerMCS} {
		for _, a := range cs.Actions() {
			w := a.GetVerb() + " " + a.GetResource().Resource
			if a.GetSubresource() != "" {
				w += "/" + a.GetSubresource()
			}
			switch a := a.(type) {
			case clienttesting.CreateAction:
				w += " " + objectName(a.GetObject())
			case clienttesting.UpdateAction:
				w += " " + objectName(a.GetObject())
			case clienttesting.DeleteAction:
				w += " " + a.GetName()
			}
			out = append(out, w)
		}
	}
	return out
}

func objectName(o runtime.Object) string {
	m, err := meta.Accessor(o)
	if err != nil {
		return "?"
	}
	return m.GetName()
}

// ownRecord returns this cluster's broker record of the test service, or
// nil when there is none.
func (f *fixture) ownRecord() *mcsv1beta1.ServiceImport {
	f.t.Helper()
	list, err := f.brokerMCS.MulticlusterV1beta1().ServiceImports(testOwnNS).List(f.ctx,
		metav1.ListOptions{LabelSelector: record.ClusterServiceSelector(testCluster, testNamespace, testName).String()})
	f.check(err)
	switch len(list.Items) {
	case 0:
		return nil
	case 1:
		return &list.Items[0]
	}
	f.t.Fatalf("%d records of %s from %s, want at most one", len(list.Items), testKey, testCluster)
	return nil
}

// ownSlices returns this cluster's broker EndpointSlices of the test
// service.
func (f *fixture) ownSlices() []discoveryv1.EndpointSlice {
	f.t.Helper()
	list, err := f.broker.DiscoveryV1().EndpointSlices(testOwnNS).List(f.ctx,
		metav1.ListOptions{LabelSelector: record.ClusterServiceSelector(testCluster, testNamespace, testName).String()})
	f.check(err)
	return list.Items
}

// conditions returns the test ServiceExport's conditions as stored.
func (f *fixture) conditions() []metav1.Condition {
	f.t.Helper()
	se, err := f.localMCS.MulticlusterV1beta1().ServiceExports(testNamespace).Get(f.ctx, testName, metav1.GetOptions{})
	f.check(err)
	return se.Status.Conditions
}

// event returns the next event recorded, or "" when there is none.
func (f *fixture) event() string {
	select {
	case e := <-f.events:
		return e
	default:
		return ""
	}
}

// wantCondition fails unless conds has a condition of type t with the given
// status and reason, and returns it.
func wantCondition(t *testing.T, conds []metav1.Condition, typ string, status metav1.ConditionStatus, reason string) metav1.Condition {
	t.Helper()
	c := meta.FindStatusCondition(conds, typ)
	if c == nil {
		t.Fatalf("no %s condition in %+v", typ, conds)
	}
	if c.Status != status || c.Reason != reason {
		t.Fatalf("%s = %s/%s (%q), want %s/%s", typ, c.Status, c.Reason, c.Message, status, reason)
	}
	return *c
}

// wantNoCondition fails if conds has a condition of type typ.
func wantNoCondition(t *testing.T, conds []metav1.Condition, typ string) {
	t.Helper()
	if c := meta.FindStatusCondition(conds, typ); c != nil {
		t.Fatalf("%s = %s/%s (%q), want no such condition", typ, c.Status, c.Reason, c.Message)
	}
}

// wantMessage fails unless msg contains every part.
func wantMessage(t *testing.T, msg string, parts ...string) {
	t.Helper()
	for _, p := range parts {
		if !strings.Contains(msg, p) {
			t.Fatalf("message %q does not say %q", msg, p)
		}
	}
}

// serviceExport is the test ServiceExport, changed by mutate when set.
func serviceExport(mutate func(*mcsv1beta1.ServiceExport)) *mcsv1beta1.ServiceExport {
	se := &mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{
		Namespace: testNamespace, Name: testName, Generation: 1, CreationTimestamp: exportCreated,
	}}
	if mutate != nil {
		mutate(se)
	}
	return se
}

// service is the test Service: IPv4, port http 80 to 8080, of the given
// type and clusterIP.
func service(typ corev1.ServiceType, clusterIP string) *corev1.Service {
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNamespace, Name: testName},
		Spec: corev1.ServiceSpec{
			Type:       typ,
			ClusterIP:  clusterIP,
			IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol},
			Ports: []corev1.ServicePort{{
				Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(8080),
			}},
		},
	}
	switch typ {
	case corev1.ServiceTypeExternalName:
		svc.Spec.ExternalName = "cart.example.com"
		svc.Spec.ClusterIP, svc.Spec.IPFamilies, svc.Spec.Ports = "", nil, nil
	case corev1.ServiceTypeNodePort, corev1.ServiceTypeLoadBalancer:
		svc.Spec.Ports[0].NodePort = 30080
	}
	return svc
}

// clusterIPService is the plain ClusterIP test Service.
func clusterIPService() *corev1.Service { return service(corev1.ServiceTypeClusterIP, "10.96.0.10") }

// localSlice is an EndpointSlice of the test Service as the core controller
// writes it: IPv4, port http 8080, each address a ready endpoint.
func localSlice(name string, addresses ...string) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: testNamespace, Name: name,
			Labels: map[string]string{discoveryv1.LabelServiceName: testName, discoveryv1.LabelManagedBy: "endpointslice-controller.k8s.io"},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To[int32](8080)}},
	}
	for _, a := range addresses {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{
			Addresses:  []string{a},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)},
			NodeName:   ptr.To("node-1"),
			TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: testNamespace, Name: "cart-" + a, UID: apitypes.UID("uid-" + a)},
		})
	}
	return s
}

// otherRecord is cluster's broker record of the test service, exported at
// created, with ClusterSetIPs off as the test cluster's are by default;
// mutate, when set, changes the export first.
func otherRecord(cluster string, created time.Time, mutate func(*record.Export)) *mcsv1beta1.ServiceImport {
	e := record.Export{
		Cluster:    cluster,
		Namespace:  testNamespace,
		Name:       testName,
		Created:    metav1.NewTime(created),
		Type:       mcsv1beta1.ClusterSetIP,
		Ports:      []mcsv1beta1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}},
		IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol},

		ClusterSetIPDisabled: true,
	}
	if mutate != nil {
		mutate(&e)
	}
	si := record.Encode(e)
	si.Namespace = record.MemberNamespace(testBrokerNS, cluster)
	return si
}
