package broker

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	coordinationv1 "k8s.io/api/coordination/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	mcsclient "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned"

	"github.com/mcsd-io/mcsd/internal/record"
)

// Moved counts what Migrate moved of one member.
type Moved struct {
	Records, EndpointSlices, Leases int
}

// Migrate brings a broker of the shared layout, where every member wrote
// its export records, EndpointSlices and Lease into the broker namespace,
// to this version's: it runs Install with settings (the new policies, and a
// namespace with its ResourceQuota for every member), then moves each
// member's objects from the broker namespace into the member's namespace
// and deletes them from the broker namespace. A record keeps, in
// record.AnnotationStored, when the broker first stored it, so that no
// service changes precedence (type, ports, ClusterSetIPs) by the move.
// Objects of clusters that are no members (no identity) are left where
// they are and named in the error. It moves nothing when a member has more
// objects than its new budget: the error says whose and how many.
// Running it again moves what is left.
//
// Until a member runs an mcsd of this version, its writes to the broker
// are refused (they go to the broker namespace), and members of the two
// versions do not see each other's new writes: move, then roll out the new
// mcsd to every member at once (docs in manifests/broker/README.md).
func Migrate(ctx context.Context, config *rest.Config, settings Settings) (map[string]Moved, error) {
	settings = settings.WithDefaults()
	namespace := settings.Namespace
	kube, err := kubernetes.NewForConfig(config)
	if err != nil {
		return nil, err
	}
	mcs, err := mcsclient.NewForConfig(config)
	if err != nil {
		return nil, err
	}
	sel := metav1.ListOptions{LabelSelector: record.LabelSourceCluster}
	records, err := mcs.MulticlusterV1beta1().ServiceImports(namespace).List(ctx, sel)
	if err != nil {
		return nil, fmt.Errorf("listing the export records in %s: %w", namespace, err)
	}
	sliceList, err := kube.DiscoveryV1().EndpointSlices(namespace).List(ctx, sel)
	if err != nil {
		return nil, fmt.Errorf("listing the EndpointSlices in %s: %w", namespace, err)
	}
	leases, err := kube.CoordinationV1().Leases(namespace).List(ctx, sel)
	if err != nil {
		return nil, fmt.Errorf("listing the Leases in %s: %w", namespace, err)
	}
	members, err := Members(ctx, kube, namespace)
	if err != nil {
		return nil, err
	}
	count := map[string]*Moved{}
	of := func(m metav1.Object) string { return m.GetLabels()[record.LabelSourceCluster] }
	for i := range records.Items {
		counter(count, of(&records.Items[i])).Records++
	}
	for i := range sliceList.Items {
		counter(count, of(&sliceList.Items[i])).EndpointSlices++
	}
	var strangers, over []string
	b := settings.MemberBudget
	for _, id := range slices.Sorted(maps.Keys(count)) {
		c := count[id]
		switch {
		case !slices.Contains(members, id):
			strangers = append(strangers, id)
		case c.Records > b.ServiceImports || c.EndpointSlices > b.EndpointSlices:
			over = append(over, fmt.Sprintf("%s has %d records and %d EndpointSlices", id, c.Records, c.EndpointSlices))
		}
	}
	if len(over) > 0 {
		return nil, fmt.Errorf("members have more than their budget of %d records and %d EndpointSlices (%s, %s): %s; nothing moved",
			b.ServiceImports, b.EndpointSlices, settingServiceImports, settingEndpointSlices, strings.Join(over, ", "))
	}
	if err := Install(ctx, config, settings); err != nil {
		return nil, err
	}

	// What moves: each member's objects, with how to copy one into a
	// namespace and delete the original, and what it counts as.
	type item struct {
		kind  string
		obj   metav1.Object
		copy  func(namespace string) error
		drop  func() error
		count func(*Moved)
	}
	var items []item
	for i := range records.Items {
		r := &records.Items[i]
		items = append(items, item{"export record", r,
			func(ns string) error {
				_, err := mcs.MulticlusterV1beta1().ServiceImports(ns).Create(ctx, record.Moved(r, ns), metav1.CreateOptions{})
				return err
			},
			func() error {
				return mcs.MulticlusterV1beta1().ServiceImports(namespace).Delete(ctx, r.Name, uidPrecondition(r))
			},
			func(m *Moved) { m.Records++ }})
	}
	for i := range sliceList.Items {
		s := &sliceList.Items[i]
		items = append(items, item{"EndpointSlice", s,
			func(ns string) error {
				_, err := kube.DiscoveryV1().EndpointSlices(ns).Create(ctx, &discoveryv1.EndpointSlice{
					ObjectMeta:  metav1.ObjectMeta{Name: s.Name, Namespace: ns, Labels: s.Labels, Annotations: s.Annotations},
					AddressType: s.AddressType, Endpoints: s.Endpoints, Ports: s.Ports,
				}, metav1.CreateOptions{})
				return err
			},
			func() error {
				return kube.DiscoveryV1().EndpointSlices(namespace).Delete(ctx, s.Name, uidPrecondition(s))
			},
			func(m *Moved) { m.EndpointSlices++ }})
	}
	for i := range leases.Items {
		l := &leases.Items[i]
		if l.Name != record.LeaseName(of(l)) {
			continue
		}
		items = append(items, item{"Lease", l,
			func(ns string) error {
				_, err := kube.CoordinationV1().Leases(ns).Create(ctx, &coordinationv1.Lease{
					ObjectMeta: metav1.ObjectMeta{Name: l.Name, Namespace: ns, Labels: l.Labels, Annotations: l.Annotations},
					Spec:       l.Spec,
				}, metav1.CreateOptions{})
				return err
			},
			func() error { return kube.CoordinationV1().Leases(namespace).Delete(ctx, l.Name, uidPrecondition(l)) },
			func(m *Moved) { m.Leases++ }})
	}
	moved := map[string]Moved{}
	for _, it := range items {
		id := of(it.obj)
		if !slices.Contains(members, id) {
			continue
		}
		// A copy there already is kept: an earlier run made it.
		to := record.MemberNamespace(namespace, id)
		if err := it.copy(to); err != nil && !apierrors.IsAlreadyExists(err) {
			return moved, fmt.Errorf("copying %s %s/%s to %s: %w", it.kind, namespace, it.obj.GetName(), to, err)
		}
		if err := it.drop(); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return moved, fmt.Errorf("deleting %s %s/%s, copied to %s: %w", it.kind, namespace, it.obj.GetName(), to, err)
		}
		m := moved[id]
		it.count(&m)
		moved[id] = m
	}
	if len(strangers) > 0 {
		return moved, fmt.Errorf("left in %s the records of clusters that are no members (no ServiceAccount %s): %s; delete them with kubectl delete serviceimports,endpointslices,leases -l %s=<cluster>",
			namespace, ServiceAccountName("<cluster>"), strings.Join(strangers, ", "), record.LabelSourceCluster)
	}
	return moved, nil
}

func counter(m map[string]*Moved, id string) *Moved {
	if m[id] == nil {
		m[id] = &Moved{}
	}
	return m[id]
}

func uidPrecondition(obj metav1.Object) metav1.DeleteOptions {
	uid := obj.GetUID()
	return metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}}
}
