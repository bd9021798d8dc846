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
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
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
	shared, err := listShared(ctx, kube, mcs, namespace)
	if err != nil {
		return nil, err
	}
	members, err := Members(ctx, kube, namespace)
	if err != nil {
		return nil, err
	}
	strangers, err := shared.check(members, settings.MemberBudget)
	if err != nil {
		return nil, err
	}
	if err := Install(ctx, config, settings); err != nil {
		return nil, err
	}
	moved := map[string]Moved{}
	for _, it := range shared.moves(ctx, kube, mcs, namespace) {
		id := sourceCluster(it.obj)
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

// sharedLayout is what members wrote into the broker namespace in the
// shared layout.
type sharedLayout struct {
	records []mcsv1beta1.ServiceImport
	slices  []discoveryv1.EndpointSlice
	leases  []coordinationv1.Lease
}

// listShared lists the members' objects in the broker namespace.
func listShared(ctx context.Context, kube kubernetes.Interface, mcs mcsclient.Interface, namespace string) (*sharedLayout, error) {
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
	return &sharedLayout{records: records.Items, slices: sliceList.Items, leases: leases.Items}, nil
}

func sourceCluster(m metav1.Object) string { return m.GetLabels()[record.LabelSourceCluster] }

// check returns the clusters with objects that are no members, or an error
// naming the members with more objects than budget allows.
func (l *sharedLayout) check(members []string, b Budget) ([]string, error) {
	count := map[string]*Moved{}
	for i := range l.records {
		counter(count, sourceCluster(&l.records[i])).Records++
	}
	for i := range l.slices {
		counter(count, sourceCluster(&l.slices[i])).EndpointSlices++
	}
	var strangers, over []string
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
	return strangers, nil
}

// move is one object to move: how to copy it into a namespace and delete
// the original, and what it counts as.
type move struct {
	kind  string
	obj   metav1.Object
	copy  func(namespace string) error
	drop  func() error
	count func(*Moved)
}

// moves are the moves of every object of l, in the broker namespace.
func (l *sharedLayout) moves(ctx context.Context, kube kubernetes.Interface, mcs mcsclient.Interface, namespace string) []move {
	var out []move
	for i := range l.records {
		r := &l.records[i]
		out = append(out, move{"export record", r,
			func(ns string) error {
				_, err := mcs.MulticlusterV1beta1().ServiceImports(ns).Create(ctx, record.Moved(r, ns), metav1.CreateOptions{})
				return err
			},
			func() error {
				return mcs.MulticlusterV1beta1().ServiceImports(namespace).Delete(ctx, r.Name, uidPrecondition(r))
			},
			func(m *Moved) { m.Records++ }})
	}
	for i := range l.slices {
		s := &l.slices[i]
		out = append(out, move{"EndpointSlice", s,
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
	for i := range l.leases {
		le := &l.leases[i]
		if le.Name != record.LeaseName(sourceCluster(le)) {
			continue
		}
		out = append(out, move{"Lease", le,
			func(ns string) error {
				_, err := kube.CoordinationV1().Leases(ns).Create(ctx, &coordinationv1.Lease{
					ObjectMeta: metav1.ObjectMeta{Name: le.Name, Namespace: ns, Labels: le.Labels, Annotations: le.Annotations},
					Spec:       le.Spec,
				}, metav1.CreateOptions{})
				return err
			},
			func() error { return kube.CoordinationV1().Leases(namespace).Delete(ctx, le.Name, uidPrecondition(le)) },
			func(m *Moved) { m.Leases++ }})
	}
	return out
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
