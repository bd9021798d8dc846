package conformance

import (
	"context"
	"fmt"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/mcsd-io/mcsd/test/lib/hold"
)

// coreEndpointSliceManager is the managed-by value of the EndpointSlices
// Kubernetes' own controller writes; MCS EndpointSlices must not carry it.
const coreEndpointSliceManager = "endpointslice-controller.k8s.io"

// forEachIPFamily ends the names of the specs that upstream runs for each
// IP family; each runs a subtest per family the clusters share (IPv4,
// IPv6).
const forEachIPFamily = " for each IP family"

// Specs are the upstream suite's 27 specs, in its order.
var Specs = []Spec{
	{Name: "A ServiceImport should only exist as long as there's at least one exporting cluster", Run: specImportLifetime},
	{Name: "Only labels and annotations specified as exported in the ServiceExport should be propagated to the ServiceImport", Run: specExportedMetadata},
	{Name: "A service exported on two clusters with conflicting annotations and labels should apply the conflict resolution policy and report a Conflict condition on each ServiceExport", Run: specMetadataConflict},
	{Name: "Exporting a ClusterIP service should create a ServiceImport of type ClusterSetIP in the service's namespace in each cluster. Unexporting should delete the ServiceImport", Run: specClusterIPImport},
	{Name: "The SessionAffinity for a ClusterSetIP ServiceImport should match the exported service's SessionAffinity", Run: specSessionAffinity},
	{Name: "The InternalTrafficPolicy for a ClusterSetIP ServiceImport should match the exported service's InternalTrafficPolicy", Run: specInternalTrafficPolicy},
	{Name: "The TrafficDistribution for a ClusterSetIP ServiceImport should match the exported service's TrafficDistribution", Run: specTrafficDistribution},
	{Name: "An IP should be allocated for a ClusterSetIP ServiceImport", Run: specIPAllocated},
	{Name: "The ports for a ClusterSetIP ServiceImport should match those of the exported service", Run: specPorts},
	{Name: "A ClusterIP service exported on two clusters should expose the union of the constituent service ports and raise a conflict", Run: specPortUnion},
	{Name: "A ClusterIP service exported on two clusters with conflicting ports should apply the conflict resolution policy and report a Conflict condition on each ServiceExport", Run: specPortConflict},
	{Name: "Exporting a headless service should create a ServiceImport of type Headless in the service's namespace in each cluster. Unexporting should delete the ServiceImport", Run: specHeadlessImport},
	{Name: "No clusterset IP should be allocated for a Headless ServiceImport", Run: specHeadlessNoIP},
	{Name: "Exporting an ExternalName service should set ServiceExport Valid condition to False", Run: specExternalName},
	{Name: "A service exported on two clusters with conflicting headlessness should apply the conflict resolution policy and report a Conflict condition on the ServiceExport", Run: specTypeConflict},
	{Name: "Exporting a service should create an MCS EndpointSlice in the service's namespace in each cluster with the required MCS labels. Unexporting should delete the EndpointSlice.", Run: specEndpointSlices},
	{Name: "A DNS lookup of the <service>.<ns>.svc.clusterset.local domain for a ClusterIP service should resolve to the clusterset IP" + forEachIPFamily, Run: specDNSClusterSetIP, Traffic: true},
	{Name: "A DNS SRV query of the <service>.<ns>.svc.clusterset.local domain for a ClusterIP service should return valid SRV records", Run: specDNSClusterIPSRV, Traffic: true},
	{Name: "DNS lookups of the <service>.<ns>.svc.cluster.local domain for a ClusterIP service should only resolve local services" + forEachIPFamily, Run: specDNSClusterLocal, Traffic: true},
	{Name: "A DNS query of the <service>.<ns>.svc.clusterset.local domain for a headless service should return the ready endpoint addresses of all the backing pods" + forEachIPFamily, Run: specDNSHeadless, Traffic: true},
	{Name: "A DNS query of the <hostname>.<clusterid>.<service>.<ns>.svc.clusterset.local domain for a headless StatefulSet service should return the requested pod's endpoint address" + forEachIPFamily, Run: specDNSHostname, Traffic: true},
	{Name: "A DNS SRV query of the <service>.<ns>.svc.clusterset.local domain for a headless service should return valid SRV records", Run: specDNSHeadlessSRV, Traffic: true},
	{Name: "Connectivity to a service that is not exported should be inaccessible" + forEachIPFamily, Run: specNotExported, Traffic: true},
	{Name: "Connectivity to an exported ClusterIP service should be accessible through DNS" + forEachIPFamily, Run: specAccessible, Traffic: true},
	{Name: "Connectivity to a ClusterIP service existing in two clusters but exported from one should only access the exporting cluster" + forEachIPFamily, Run: specExportedFromOne, Traffic: true},
	{Name: "Connectivity to exported services with same port name but different port numbers on each cluster should only route traffic to the cluster that exposes the port" + forEachIPFamily, Run: specSamePortName, Traffic: true},
	{Name: "Connectivity to exported services with different port name on each cluster should route traffic to each port only to the cluster that exposes it" + forEachIPFamily, Run: specDifferentPortName, Traffic: true},
}

// --- service_import.go ---

func specImportLifetime(t *testing.T, w *World) {
	e := w.Begin(t)
	e.DeployHello(nil)
	e.AwaitImport(0, nil)

	e.HelloPods(1, 1, "")
	e.Deploy(1, HelloService())
	e.Export(1, HelloServiceExport())
	e.holdImport(0, "exported from both clusters")

	e.unexport(0)
	e.holdImport(0, "unexported from cluster1 while still exported from cluster2")
	e.holdImport(1, "unexported from cluster1 while still exported from cluster2")

	e.unexport(1)
	for i := range w.members {
		e.awaitNoImport(i, "unexported from every cluster")
	}
}

func hasAll(got, want map[string]string) error {
	for k, v := range want {
		if got[k] != v {
			return fmt.Errorf("%s=%s missing from %v", k, v, got)
		}
	}
	return nil
}

func hasNone(got, unwanted map[string]string) error {
	for k, v := range unwanted {
		if g, ok := got[k]; ok && g == v {
			return fmt.Errorf("%s=%s present in %v", k, v, got)
		}
	}
	return nil
}

func specExportedMetadata(t *testing.T, w *World) {
	e := w.Begin(t)
	svc := HelloService()
	e.HelloPods(0, 1, "")
	e.Deploy(0, svc)
	se := HelloServiceExport()
	se.Spec.ExportedLabels = map[string]string{"dummy-label": "true"}
	se.Spec.ExportedAnnotations = map[string]string{"dummy-annotation": "true"}
	e.Export(0, se)

	for i := range w.members {
		e.AwaitImport(i, func(si *mcsv1beta1.ServiceImport) error {
			for _, err := range []error{
				hasAll(si.Annotations, se.Spec.ExportedAnnotations),
				hasNone(si.Annotations, svc.Annotations),
				hasAll(si.Labels, se.Spec.ExportedLabels),
				hasNone(si.Labels, svc.Labels),
			} {
				if err != nil {
					return err
				}
			}
			return nil
		})
	}
}

func specMetadataConflict(t *testing.T, w *World) {
	e := w.Begin(t)
	se1, se2 := HelloServiceExport(), HelloServiceExport()
	se1.Spec.ExportedLabels = map[string]string{"dummy-label": "true"}
	se1.Spec.ExportedAnnotations = map[string]string{"dummy-annotation": "true"}
	se2.Spec.ExportedLabels = map[string]string{"dummy-label2": "true"}
	se2.Spec.ExportedAnnotations = map[string]string{"dummy-annotation2": "true"}
	e.twoClusters(HelloService(), HelloService(), se1, se2)

	e.awaitCondition(0, mcsv1beta1.ServiceExportConditionConflict, metav1.ConditionTrue)
	e.awaitCondition(1, mcsv1beta1.ServiceExportConditionConflict, metav1.ConditionTrue)
	e.AwaitImport(0, func(si *mcsv1beta1.ServiceImport) error {
		for _, err := range []error{
			hasAll(si.Annotations, se1.Spec.ExportedAnnotations),
			hasNone(si.Annotations, se2.Spec.ExportedAnnotations),
			hasAll(si.Labels, se1.Spec.ExportedLabels),
			hasNone(si.Labels, se2.Spec.ExportedLabels),
		} {
			if err != nil {
				return err
			}
		}
		return nil
	})
}

// checkType accepts a ServiceImport of the given type with valid families.
func checkType(want mcsv1beta1.ServiceImportType) func(*mcsv1beta1.ServiceImport) error {
	return func(si *mcsv1beta1.ServiceImport) error {
		if si.Spec.Type != want {
			return fmt.Errorf("type %q, want %q", si.Spec.Type, want)
		}
		return checkFamilies(si)
	}
}

func specClusterIPImport(t *testing.T, w *World) {
	e := w.Begin(t)
	e.DeployHello(nil)
	e.awaitCondition(0, mcsv1beta1.ServiceExportConditionValid, metav1.ConditionTrue)
	for i := range w.members {
		e.AwaitImport(i, checkType(mcsv1beta1.ClusterSetIP))
	}
	e.unexport(0)
	for i := range w.members {
		e.awaitNoImport(i, "unexported")
	}
}

func specSessionAffinity(t *testing.T, w *World) {
	e := w.Begin(t)
	svc := e.DeployHello(nil)
	e.AwaitImport(0, func(si *mcsv1beta1.ServiceImport) error {
		if si.Spec.SessionAffinity != svc.Spec.SessionAffinity {
			return fmt.Errorf("sessionAffinity %q, want %q", si.Spec.SessionAffinity, svc.Spec.SessionAffinity)
		}
		if !reflect.DeepEqual(si.Spec.SessionAffinityConfig, svc.Spec.SessionAffinityConfig) {
			return fmt.Errorf("sessionAffinityConfig %v, want %v", si.Spec.SessionAffinityConfig, svc.Spec.SessionAffinityConfig)
		}
		return nil
	})
}

func specInternalTrafficPolicy(t *testing.T, w *World) {
	e := w.Begin(t)
	want := ptr.To(corev1.ServiceInternalTrafficPolicyCluster)
	e.DeployHello(func(svc *corev1.Service) { svc.Spec.InternalTrafficPolicy = want })
	e.AwaitImport(0, func(si *mcsv1beta1.ServiceImport) error {
		if !reflect.DeepEqual(si.Spec.InternalTrafficPolicy, want) {
			return fmt.Errorf("internalTrafficPolicy %v, want %v", ptr.Deref(si.Spec.InternalTrafficPolicy, "<nil>"), *want)
		}
		return nil
	})
}

func specTrafficDistribution(t *testing.T, w *World) {
	e := w.Begin(t)
	want := ptr.To(corev1.ServiceTrafficDistributionPreferClose)
	e.DeployHello(func(svc *corev1.Service) { svc.Spec.TrafficDistribution = want })
	e.AwaitImport(0, func(si *mcsv1beta1.ServiceImport) error {
		if !reflect.DeepEqual(si.Spec.TrafficDistribution, want) {
			return fmt.Errorf("trafficDistribution %v, want %v", ptr.Deref(si.Spec.TrafficDistribution, "<nil>"), *want)
		}
		return nil
	})
}

func specIPAllocated(t *testing.T, w *World) {
	e := w.Begin(t)
	e.DeployHello(nil)
	si := e.AwaitImport(0, func(si *mcsv1beta1.ServiceImport) error {
		if len(si.Spec.IPs) == 0 {
			return fmt.Errorf("no spec.ips")
		}
		return checkFamilies(si)
	})
	if _, err := netip.ParseAddr(si.Spec.IPs[0]); err != nil {
		t.Fatalf("spec.ips[0] %q is not a valid IP: %v", si.Spec.IPs[0], err)
	}
}

func specPorts(t *testing.T, w *World) {
	e := w.Begin(t)
	svc := e.DeployHello(nil)
	e.AwaitImport(0, checkPorts(mcsPorts(svc.Spec.Ports...)))
}

func specPortUnion(t *testing.T, w *World) {
	e := w.Begin(t)
	svc1, svc2 := HelloService(), HelloService()
	extra := corev1.ServicePort{Name: "stcp", Port: 142, Protocol: corev1.ProtocolSCTP}
	svc2.Spec.Ports = []corev1.ServicePort{svc1.Spec.Ports[0], extra}
	e.twoClusters(svc1, svc2, HelloServiceExport(), HelloServiceExport())

	e.awaitCondition(0, mcsv1beta1.ServiceExportConditionConflict, metav1.ConditionTrue)
	e.awaitCondition(1, mcsv1beta1.ServiceExportConditionConflict, metav1.ConditionTrue)
	e.AwaitImport(0, checkPorts(mcsPorts(append(slices.Clone(svc1.Spec.Ports), extra)...)))
}

func specPortConflict(t *testing.T, w *World) {
	e := w.Begin(t)
	svc1, svc2 := HelloService(), HelloService()
	svc2.Spec.Ports = []corev1.ServicePort{svc1.Spec.Ports[0]}
	svc2.Spec.Ports[0].Port++
	e.twoClusters(svc1, svc2, HelloServiceExport(), HelloServiceExport())

	e.awaitCondition(0, mcsv1beta1.ServiceExportConditionConflict, metav1.ConditionTrue)
	e.awaitCondition(1, mcsv1beta1.ServiceExportConditionConflict, metav1.ConditionTrue)
	e.AwaitImport(0, checkPorts(mcsPorts(svc1.Spec.Ports...)))
}

func headless(svc *corev1.Service) { svc.Spec.ClusterIP = corev1.ClusterIPNone }

func specHeadlessImport(t *testing.T, w *World) {
	e := w.Begin(t)
	e.DeployHello(headless)
	for i := range w.members {
		e.AwaitImport(i, checkType(mcsv1beta1.Headless))
	}
	e.unexport(0)
	for i := range w.members {
		e.awaitNoImport(i, "unexported")
	}
}

func specHeadlessNoIP(t *testing.T, w *World) {
	e := w.Begin(t)
	e.DeployHello(headless)
	e.AwaitImport(0, checkFamilies)
	if err := hold.For(e.ctx, HoldFor, PollEvery, func(context.Context) error {
		si, err := e.getImport(0)
		if err != nil {
			return fmt.Errorf("getting the ServiceImport: %w", err)
		}
		if len(si.Spec.IPs) > 0 {
			return fmt.Errorf("headless ServiceImport has spec.ips %v", si.Spec.IPs)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

func specExternalName(t *testing.T, w *World) {
	e := w.Begin(t)
	e.DeployHello(func(svc *corev1.Service) {
		svc.Spec.Type = corev1.ServiceTypeExternalName
		svc.Spec.ExternalName = "example.com"
		svc.Spec.SessionAffinity = ""
		svc.Spec.SessionAffinityConfig = nil
		svc.Spec.IPFamilyPolicy = nil // an ExternalName Service has no IPs
	})
	e.awaitCondition(0, mcsv1beta1.ServiceExportConditionValid, metav1.ConditionFalse)
	e.holdNoImport(0, "the ServiceImport should not exist for an ExternalName service")
	e.holdNoImport(1, "the ServiceImport should not exist for an ExternalName service")
}

func specTypeConflict(t *testing.T, w *World) {
	e := w.Begin(t)
	svc2 := HelloService()
	headless(svc2)
	e.twoClusters(HelloService(), svc2, HelloServiceExport(), HelloServiceExport())

	e.awaitCondition(0, mcsv1beta1.ServiceExportConditionConflict, metav1.ConditionTrue)
	e.awaitCondition(1, mcsv1beta1.ServiceExportConditionConflict, metav1.ConditionTrue)
	for i := range w.members {
		e.AwaitImport(i, checkType(mcsv1beta1.ClusterSetIP))
	}
}

// --- endpoint_slice.go ---

func specEndpointSlices(t *testing.T, w *World) {
	e := w.Begin(t)
	e.DeployHello(nil)
	names := make([][]string, len(w.members))
	for i := range w.members {
		for _, f := range e.awaitFamilies(i) {
			eps := e.awaitMCSSlice(i, addressType(f), nil)
			names[i] = append(names[i], eps.Name)
			if got := eps.Labels[mcsv1beta1.LabelServiceName]; got != serviceName {
				t.Errorf("%s: MCS EndpointSlice %s: label %s=%q, want %q", e.Member(i).ID, eps.Name, mcsv1beta1.LabelServiceName, got, serviceName)
			}
			managedBy, ok := eps.Labels[discoveryv1.LabelManagedBy]
			if !ok {
				t.Errorf("%s: MCS EndpointSlice %s has no %s label", e.Member(i).ID, eps.Name, discoveryv1.LabelManagedBy)
			}
			if managedBy == coreEndpointSliceManager {
				t.Errorf("%s: MCS EndpointSlice %s: %s=%s, the core controller's", e.Member(i).ID, eps.Name, discoveryv1.LabelManagedBy, managedBy)
			}
		}
	}
	if t.Failed() {
		return
	}

	e.unexport(0)
	for i := range w.members {
		for _, name := range names[i] {
			err := wait.PollUntilContextTimeout(e.ctx, PollEvery, e.w.await, true, func(ctx context.Context) (bool, error) {
				_, err := e.Member(i).Kube.DiscoveryV1().EndpointSlices(e.ns).Get(ctx, name, metav1.GetOptions{})
				return apierrors.IsNotFound(err), nil
			})
			if err != nil {
				t.Fatalf("%s: EndpointSlice %s not deleted within %v of unexport", e.Member(i).ID, name, e.w.await)
			}
		}
	}
}

// --- clusterip_service_dns.go ---

// Exactly accepts an answer whose addresses are exactly want.
func Exactly(want []string) func(*dns.Msg) error {
	want = slices.Clone(want)
	slices.Sort(want)
	return func(m *dns.Msg) error {
		if m.Rcode != dns.RcodeSuccess {
			return fmt.Errorf("rcode %s", dns.RcodeToString[m.Rcode])
		}
		if got := Addresses(m); !slices.Equal(got, want) {
			return fmt.Errorf("addresses %v, want %v", got, want)
		}
		return nil
	}
}

// ipOf returns the ServiceImport's clusterset IP of family f.
func ipOf(si *mcsv1beta1.ServiceImport, f corev1.IPFamily) (string, error) {
	for k, ip := range si.Spec.IPs {
		if k < len(si.Spec.IPFamilies) && si.Spec.IPFamilies[k] == f {
			return ip, nil
		}
	}
	return "", fmt.Errorf("no %s clusterset IP: spec.ips %v, spec.ipFamilies %v", f, si.Spec.IPs, si.Spec.IPFamilies)
}

// CheckIPOf accepts a ServiceImport with valid families and a clusterset
// IP of family f.
func CheckIPOf(f corev1.IPFamily) func(*mcsv1beta1.ServiceImport) error {
	return func(si *mcsv1beta1.ServiceImport) error {
		if err := checkFamilies(si); err != nil {
			return err
		}
		_, err := ipOf(si, f)
		return err
	}
}

func specDNSClusterSetIP(t *testing.T, w *World) {
	e := w.Begin(t)
	e.DeployHello(nil)
	e.forEachFamily(func(e *Env, f corev1.IPFamily) {
		for i := range w.members {
			ip, _ := ipOf(e.AwaitImport(i, CheckIPOf(f)), f)
			e.AwaitAnswer(i, e.FQDN(), recordType(f), Exactly([]string{ip}))
		}
	})
}

func specDNSClusterIPSRV(t *testing.T, w *World) {
	e := w.Begin(t)
	e.DeployHello(nil)
	// tcp/42 and udp/42 are one (port, target) pair: one record.
	want := []srv{{port: ServicePort, target: strings.TrimSuffix(e.FQDN(), ".")}}
	for i := range w.members {
		e.AwaitAnswer(i, e.FQDN(), dns.TypeSRV, func(m *dns.Msg) error {
			if got := srvRecords(m); !slices.Equal(got, want) {
				return fmt.Errorf("SRV records %v, want %v", got, want)
			}
			return nil
		})
	}
}

// specDNSClusterLocal asks the cluster's own DNS (CoreDNS's kubernetes
// plugin, see clusterDNS) for the cluster.local name of an exported
// Service: it must give the local Service's cluster IP, not the clusterset
// IP. mcsd's server, for its part, must leave cluster.local alone: it
// refuses the name, and answers the clusterset name with the clusterset IP.
func specDNSClusterLocal(t *testing.T, w *World) {
	e := w.Begin(t)
	svc := e.DeployHello(nil)
	var got *corev1.Service
	err := wait.PollUntilContextTimeout(e.ctx, time.Second, e.w.await, true, func(ctx context.Context) (bool, error) {
		var err error
		got, err = e.Member(0).Kube.CoreV1().Services(e.ns).Get(ctx, svc.Name, metav1.GetOptions{})
		return err == nil && got.Spec.ClusterIP != "", nil
	})
	if err != nil {
		t.Fatalf("the Service was not given a cluster IP")
	}
	localName := fmt.Sprintf("%s.%s.svc.cluster.local.", serviceName, e.ns)
	e.forEachFamily(func(e *Env, f corev1.IPFamily) {
		t := e.t
		var local string
		for k, ip := range got.Spec.ClusterIPs {
			if k < len(got.Spec.IPFamilies) && got.Spec.IPFamilies[k] == f {
				local = ip
			}
		}
		if local == "" {
			t.Fatalf("the Service has no %s cluster IP: %v %v", f, got.Spec.IPFamilies, got.Spec.ClusterIPs)
		}
		si := e.AwaitImport(0, CheckIPOf(f))
		if slices.Contains(si.Spec.IPs, local) {
			t.Fatalf("the clusterset IPs %v include the local cluster IP %s", si.Spec.IPs, local)
		}
		clustersetIP, _ := ipOf(si, f)

		qtype := recordType(f)
		check := Exactly([]string{local})
		var last error
		err := wait.PollUntilContextTimeout(e.ctx, time.Second, e.w.await, true, func(context.Context) (bool, error) {
			m, err := e.queryFrom(e.requesters[0][0], ClusterDNS, "udp", localName, qtype)
			if err != nil {
				last = err
				return false, nil
			}
			if last = check(m); last != nil {
				last = fmt.Errorf("%w (answer: %v)", last, m.Answer)
				return false, nil
			}
			return true, nil
		})
		if err != nil {
			t.Fatalf("the cluster DNS of %s: %s %s not resolved to the local cluster IP within %v: %v", e.Member(0).ID, dns.TypeToString[qtype], localName, e.w.await, last)
		}

		e.AwaitAnswer(0, e.FQDN(), qtype, Exactly([]string{clustersetIP}))
		for _, network := range []string{"udp", "tcp"} {
			m, err := e.queryFrom(e.requesters[0][0], MCSD, network, localName, qtype)
			if err != nil {
				t.Fatalf("asking mcsd for %s %s over %s: %v", dns.TypeToString[qtype], localName, network, err)
			}
			if m.Rcode != dns.RcodeRefused || len(m.Answer) > 0 {
				t.Fatalf("mcsd answered %s %s over %s with %s %v, want REFUSED without answers (cluster.local is the cluster DNS's zone)", dns.TypeToString[qtype], localName, network, dns.RcodeToString[m.Rcode], m.Answer)
			}
		}
	})
}

// --- headless_service_dns.go ---

const replicas = 2

func specDNSHeadless(t *testing.T, w *World) {
	e := w.Begin(t)
	e.HelloPods(0, replicas, "")
	svc := HelloService()
	headless(svc)
	e.Deploy(0, svc)
	e.Export(0, HelloServiceExport())
	e.forEachFamily(func(e *Env, f corev1.IPFamily) {
		var want []string
		for _, ep := range e.awaitEndpoints(0, addressType(f), replicas) {
			want = append(want, ep.address)
		}
		for i := range w.members {
			e.awaitImportOf(i, f)
			e.AwaitAnswer(i, e.FQDN(), recordType(f), Exactly(want))
		}
	})
}

// awaitImportOf waits until cluster i's hello ServiceImport has valid
// families, f among them.
func (e *Env) awaitImportOf(i int, f corev1.IPFamily) *mcsv1beta1.ServiceImport {
	e.t.Helper()
	return e.AwaitImport(i, func(si *mcsv1beta1.ServiceImport) error {
		if err := checkFamilies(si); err != nil {
			return err
		}
		if !slices.Contains(si.Spec.IPFamilies, f) {
			return fmt.Errorf("spec.ipFamilies %v without %s", si.Spec.IPFamilies, f)
		}
		return nil
	})
}

func specDNSHostname(t *testing.T, w *World) {
	e := w.Begin(t)
	// A StatefulSet's pods: hostname hello-<n> in subdomain hello, the
	// headless service's name.
	e.HelloPods(0, replicas, serviceName)
	svc := HelloService()
	headless(svc)
	e.Deploy(0, svc)
	e.Export(0, HelloServiceExport())
	e.forEachFamily(func(e *Env, f corev1.IPFamily) {
		for i := range w.members {
			e.awaitImportOf(i, f)
			eps := e.awaitMCSSlice(i, addressType(f), func(eps *discoveryv1.EndpointSlice) error {
				if len(eps.Endpoints) != replicas {
					return fmt.Errorf("MCS EndpointSlice %s has %d endpoints, want %d", eps.Name, len(eps.Endpoints), replicas)
				}
				for _, ep := range eps.Endpoints {
					if !ptr.Deref(ep.Conditions.Ready, true) {
						return fmt.Errorf("endpoint %v of MCS EndpointSlice %s is not ready", ep.Addresses, eps.Name)
					}
					if ptr.Deref(ep.Hostname, "") == "" {
						return fmt.Errorf("endpoint %v of MCS EndpointSlice %s has no hostname", ep.Addresses, eps.Name)
					}
				}
				return nil
			})
			clusterID := eps.Labels[mcsv1beta1.LabelSourceCluster]
			for _, ep := range eps.Endpoints {
				e.AwaitAnswer(i, e.FQDN(*ep.Hostname, clusterID), recordType(f), Exactly(ep.Addresses))
			}
		}
	})
}

func specDNSHeadlessSRV(t *testing.T, w *World) {
	e := w.Begin(t)
	e.HelloPods(0, replicas, "")
	svc := HelloService()
	headless(svc)
	svc = e.Deploy(0, svc)
	e.Export(0, HelloServiceExport())
	var want []srv
	for _, f := range svc.Spec.IPFamilies {
		for _, ep := range e.awaitEndpoints(0, addressType(f), replicas) {
			// tcp/42 and udp/42 are one (port, target) pair per endpoint.
			want = append(want, srv{port: ServicePort, target: strings.TrimSuffix(e.FQDN(ep.hostname, e.Member(0).ID), ".")})
		}
	}
	slices.SortFunc(want, func(a, b srv) int { return strings.Compare(a.target, b.target) })
	for i := range w.members {
		e.AwaitAnswer(i, e.FQDN(), dns.TypeSRV, func(m *dns.Msg) error {
			if got := srvRecords(m); !slices.Equal(got, want) {
				return fmt.Errorf("SRV records %v, want %v", got, want)
			}
			return nil
		})
	}
}

// --- connectivity.go ---

// noAffinity turns client-IP session affinity off: with it, every
// connection of a request pod would go to the first backend chosen for it,
// and a misrouted share of the traffic could go unseen.
func noAffinity(svc *corev1.Service) {
	svc.Spec.SessionAffinity = corev1.ServiceAffinityNone
	svc.Spec.SessionAffinityConfig = nil
}

// TCPAndUDP are the protocols of the hello Service's port 42, the
// networks connections to it are made over.
var TCPAndUDP = []string{"tcp", "udp"}

func specNotExported(t *testing.T, w *World) {
	e := w.Begin(t)
	e.HelloPods(0, 1, "")
	e.Deploy(0, HelloService())
	e.forEachFamily(func(e *Env, f corev1.IPFamily) {
		t := e.t
		qtype := recordType(f)
		for i := range w.members {
			for _, r := range e.requesters[i] {
				for k := range 20 {
					m, err := e.queryFrom(r, w.resolveVia, "udp", e.FQDN(), qtype)
					if err != nil {
						t.Fatalf("%s: %s: query %d for %s %s: %v", e.Member(i).ID, r, k+1, dns.TypeToString[qtype], e.FQDN(), err)
					}
					if m.Rcode != dns.RcodeNameError || len(m.Answer) > 0 {
						t.Fatalf("%s: %s: %s %s of a service exported nowhere answered %s %v, want NXDOMAIN", e.Member(i).ID, r, dns.TypeToString[qtype], e.FQDN(), dns.RcodeToString[m.Rcode], m.Answer)
					}
				}
			}
		}
		e.noConnect(f, TCPAndUDP, ServicePort, 20)
		for i := range w.members {
			if si, err := e.getImport(i); err == nil {
				t.Fatalf("%s: ServiceImport of a service exported nowhere: %+v", e.Member(i).ID, si.Spec)
			}
		}
	})
}

func specAccessible(t *testing.T, w *World) {
	e := w.Begin(t)
	backend := e.HelloPods(0, 1, "")
	e.Deploy(0, HelloService())
	e.Export(0, HelloServiceExport())
	e.forEachFamily(func(e *Env, f corev1.IPFamily) {
		e.awaitOnly(f, TCPAndUDP, ServicePort, backend, 2)
	})
}

func specExportedFromOne(t *testing.T, w *World) {
	e := w.Begin(t)
	svc1, svc2 := HelloService(), HelloService()
	noAffinity(svc1)
	noAffinity(svc2)
	backend := e.HelloPods(0, 1, "")
	e.Deploy(0, svc1)
	e.HelloPods(1, 1, "")
	e.Deploy(1, svc2)
	e.Export(0, HelloServiceExport())
	e.forEachFamily(func(e *Env, f corev1.IPFamily) {
		e.awaitOnly(f, TCPAndUDP, ServicePort, backend, 20)
	})
}

// awaitFrom waits until every cluster holds an MCS EndpointSlice of family
// f with endpoints from the given source cluster: its importer has the
// source's export, so what the proxier does with it shows.
func (e *Env) awaitFrom(f corev1.IPFamily, source string) {
	e.t.Helper()
	for i := range e.w.members {
		e.awaitMCSSlice(i, addressType(f), func(eps *discoveryv1.EndpointSlice) error {
			if got := eps.Labels[mcsv1beta1.LabelSourceCluster]; got != source {
				return fmt.Errorf("only endpoints from %s", got)
			}
			return nil
		})
	}
}

func specSamePortName(t *testing.T, w *World) {
	e := w.Begin(t)
	svc1, svc2 := HelloService(), HelloService()
	noAffinity(svc1)
	noAffinity(svc2)
	// The same port name, another number; the backends listen on 42 in
	// both clusters, so only the proxier can keep traffic to port 42 away
	// from the second cluster.
	svc2.Spec.Ports = []corev1.ServicePort{{Name: "tcp", Port: 4242, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(ServicePort)}}
	e.twoClusters(svc1, svc2, HelloServiceExport(), HelloServiceExport())
	backend1 := podsOf(e, 0)

	e.awaitCondition(1, mcsv1beta1.ServiceExportConditionConflict, metav1.ConditionTrue)
	e.forEachFamily(func(e *Env, f corev1.IPFamily) {
		e.awaitFrom(f, e.Member(1).ID)
		// Port 42 is TCP and UDP in the first cluster only.
		e.awaitOnly(f, TCPAndUDP, ServicePort, backend1, 20)
	})
}

func specDifferentPortName(t *testing.T, w *World) {
	e := w.Begin(t)
	svc1, svc2 := HelloService(), HelloService()
	noAffinity(svc1)
	noAffinity(svc2)
	svc2.Spec.Ports = []corev1.ServicePort{{Name: "tcp2", Port: 4242, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(ServicePort)}}
	e.twoClusters(svc1, svc2, HelloServiceExport(), HelloServiceExport())
	backend1, backend2 := podsOf(e, 0), podsOf(e, 1)

	for i := range w.members {
		e.AwaitImport(i, checkPorts(mcsPorts(append(slices.Clone(svc1.Spec.Ports), svc2.Spec.Ports...)...)))
	}
	e.forEachFamily(func(e *Env, f corev1.IPFamily) {
		e.awaitFrom(f, e.Member(1).ID)
		e.awaitOnly(f, TCPAndUDP, ServicePort, backend1, 20)
		e.awaitOnly(f, []string{"tcp"}, 4242, backend2, 20)
	})
}

// podsOf returns the hello backends the spec started in cluster i.
func podsOf(e *Env, i int) []Pod {
	var out []Pod
	for _, p := range e.pods {
		if p.cluster == i && strings.HasPrefix(p.Name(), serviceName+"-") {
			out = append(out, p.Pod)
		}
	}
	return out
}
