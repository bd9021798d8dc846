package main

import (
	"context"
	"fmt"
	"net/netip"
	"sync"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
	mcsclient "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned"
)

// The data both servers answer from. It is a pure function of its sizes, so
// the load generator (another process) derives the same queries.

const (
	zone       = "clusterset.local."
	namespaces = 10
	// Cluster IDs of the endpoints' source clusters.
	clusterA, clusterB = "c1", "c2"
)

type servicePort struct {
	name   string
	proto  corev1.Protocol
	number int32
}

// clusterSetService is a ClusterSetIP ServiceImport: an IPv4 VIP, and an
// IPv6 one for every fourth.
type clusterSetService struct {
	namespace, name string
	v4, v6          netip.Addr // v6 is invalid when IPv4-only
	ports           []servicePort
}

type endpoint struct {
	cluster  string
	hostname string // "" for none
	addr     netip.Addr
	ready    bool
}

// headlessService is a Headless ServiceImport with its endpoints, split into
// one EndpointSlice per cluster.
type headlessService struct {
	namespace, name string
	ports           []servicePort
	endpoints       []endpoint
}

type dataset struct {
	clusterSet []clusterSetService
	headless   []headlessService
	// empty is a headless service whose only endpoint is not ready.
	empty headlessService
}

var (
	clusterSetPorts = []servicePort{{"http", corev1.ProtocolTCP, 80}, {"https", corev1.ProtocolTCP, 443}}
	headlessPorts   = []servicePort{{"pg", corev1.ProtocolTCP, 5432}}
)

func namespaceOf(i int) string { return fmt.Sprintf("bench-%d", i%namespaces) }

// newDataset makes services ClusterSetIP services and headless headless
// ones with endpoints ready endpoints each (half from each cluster; in each
// cluster, the last has no hostname), plus one not ready endpoint each.
func newDataset(services, headless, endpoints int) *dataset {
	d := &dataset{}
	for i := range services {
		s := clusterSetService{
			namespace: namespaceOf(i),
			name:      fmt.Sprintf("svc-%04d", i),
			v4:        netip.AddrFrom4([4]byte{243, 0, byte(i >> 8), byte(i)}),
			ports:     clusterSetPorts,
		}
		if i%4 == 0 {
			s.v6 = netip.AddrFrom16([16]byte{0: 0xfd, 2: 0x02, 3: 0x43, 14: byte(i >> 8), 15: byte(i)})
		}
		d.clusterSet = append(d.clusterSet, s)
	}
	for i := range headless {
		h := headlessService{namespace: namespaceOf(i), name: fmt.Sprintf("db-%03d", i), ports: headlessPorts}
		perCluster := [2]int{(endpoints + 1) / 2, endpoints / 2}
		for c, cluster := range []string{clusterA, clusterB} {
			for j := range perCluster[c] {
				ep := endpoint{cluster: cluster, addr: netip.AddrFrom4([4]byte{10, byte(1 + c), byte(i), byte(1 + j)}), ready: true}
				if j < perCluster[c]-1 || perCluster[c] == 1 {
					ep.hostname = fmt.Sprintf("db-%d", j)
				}
				h.endpoints = append(h.endpoints, ep)
			}
		}
		h.endpoints = append(h.endpoints, endpoint{cluster: clusterA, hostname: "standby", addr: netip.AddrFrom4([4]byte{10, 1, byte(i), 200})})
		d.headless = append(d.headless, h)
	}
	d.empty = headlessService{namespace: namespaceOf(0), name: "empty", ports: headlessPorts,
		endpoints: []endpoint{{cluster: clusterA, hostname: "e-0", addr: netip.MustParseAddr("10.9.0.1")}}}
	return d
}

// ready returns the ready endpoints.
func (h headlessService) ready() []endpoint {
	var out []endpoint
	for _, ep := range h.endpoints {
		if ep.ready {
			out = append(out, ep)
		}
	}
	return out
}

func (s clusterSetService) importObject() *mcsv1beta1.ServiceImport {
	ips := []string{s.v4.String()}
	if s.v6.IsValid() {
		ips = append(ips, s.v6.String())
	}
	return &mcsv1beta1.ServiceImport{
		ObjectMeta: metav1.ObjectMeta{Namespace: s.namespace, Name: s.name},
		Spec:       mcsv1beta1.ServiceImportSpec{Type: mcsv1beta1.ClusterSetIP, IPs: ips, Ports: importPorts(s.ports)},
	}
}

func (h headlessService) importObject() *mcsv1beta1.ServiceImport {
	return &mcsv1beta1.ServiceImport{
		ObjectMeta: metav1.ObjectMeta{Namespace: h.namespace, Name: h.name},
		Spec:       mcsv1beta1.ServiceImportSpec{Type: mcsv1beta1.Headless, Ports: importPorts(h.ports)},
	}
}

func importPorts(ports []servicePort) []mcsv1beta1.ServicePort {
	var out []mcsv1beta1.ServicePort
	for _, p := range ports {
		out = append(out, mcsv1beta1.ServicePort{Name: p.name, Protocol: p.proto, Port: p.number})
	}
	return out
}

// sliceObjects are the MCS EndpointSlices of a headless service, one per
// source cluster, with the service's ports as an exporter copies them
// (CoreDNS makes records only for ports the slice lists).
func (h headlessService) sliceObjects() []*discoveryv1.EndpointSlice {
	var out []*discoveryv1.EndpointSlice
	byCluster := map[string]*discoveryv1.EndpointSlice{}
	for _, ep := range h.endpoints {
		es := byCluster[ep.cluster]
		if es == nil {
			es = &discoveryv1.EndpointSlice{
				ObjectMeta: metav1.ObjectMeta{
					Namespace: h.namespace,
					Name:      h.name + "-" + ep.cluster,
					Labels: map[string]string{
						mcsv1beta1.LabelServiceName:   h.name,
						mcsv1beta1.LabelSourceCluster: ep.cluster,
					},
				},
				AddressType: discoveryv1.AddressTypeIPv4,
			}
			for _, p := range h.ports {
				es.Ports = append(es.Ports, discoveryv1.EndpointPort{Name: ptr.To(p.name), Protocol: ptr.To(p.proto), Port: ptr.To(p.number)})
			}
			byCluster[ep.cluster] = es
			out = append(out, es)
		}
		e := discoveryv1.Endpoint{Addresses: []string{ep.addr.String()}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(ep.ready)}}
		if ep.hostname != "" {
			e.Hostname = ptr.To(ep.hostname)
		}
		es.Endpoints = append(es.Endpoints, e)
	}
	return out
}

// load creates the namespaces and every object of the dataset, a few at a
// time.
func (d *dataset) load(ctx context.Context, kube kubernetes.Interface, mcs mcsclient.Interface) error {
	for i := range namespaces {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespaceOf(i)}}
		if _, err := kube.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating namespace %s: %w", ns.Name, err)
		}
	}
	var creates []func() error
	add := func(si *mcsv1beta1.ServiceImport, slices ...*discoveryv1.EndpointSlice) {
		creates = append(creates, func() error {
			if _, err := mcs.MulticlusterV1beta1().ServiceImports(si.Namespace).Create(ctx, si, metav1.CreateOptions{}); err != nil {
				return fmt.Errorf("creating ServiceImport %s/%s: %w", si.Namespace, si.Name, err)
			}
			for _, es := range slices {
				if _, err := kube.DiscoveryV1().EndpointSlices(es.Namespace).Create(ctx, es, metav1.CreateOptions{}); err != nil {
					return fmt.Errorf("creating EndpointSlice %s/%s: %w", es.Namespace, es.Name, err)
				}
			}
			return nil
		})
	}
	for _, s := range d.clusterSet {
		add(s.importObject())
	}
	for _, h := range append(d.headless, d.empty) {
		add(h.importObject(), h.sliceObjects()...)
	}

	work := make(chan func() error)
	errs := make(chan error, 8)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for f := range work {
				if err := f(); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	var err error
feed:
	for _, f := range creates {
		select {
		case work <- f:
		case err = <-errs:
			break feed
		}
	}
	close(work)
	wg.Wait()
	if err == nil {
		select {
		case err = <-errs:
		default:
		}
	}
	return err
}

// readerRole is what a DNS server for the clusterset zone may read. mcsd
// reads ServiceImports and EndpointSlices; CoreDNS's kubernetes plugin also
// lists Services and Namespaces (a namespace must exist for its names to
// be answered), whatever zones it serves.
func readerRole(name string, withCoreDNSExtras bool) *rbacv1.ClusterRole {
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{mcsv1beta1.GroupName}, Resources: []string{"serviceimports"}, Verbs: []string{"list", "watch"}},
			{APIGroups: []string{discoveryv1.GroupName}, Resources: []string{"endpointslices"}, Verbs: []string{"list", "watch"}},
		},
	}
	if withCoreDNSExtras {
		role.Rules = append(role.Rules, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"services", "namespaces"}, Verbs: []string{"list", "watch"}})
	}
	return role
}

// grant creates the role and binds it to the user.
func grant(ctx context.Context, kube kubernetes.Interface, role *rbacv1.ClusterRole, user string) error {
	if _, err := kube.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating ClusterRole %s: %w", role.Name, err)
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: role.Name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}},
	}
	if _, err := kube.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating ClusterRoleBinding %s: %w", binding.Name, err)
	}
	return nil
}
