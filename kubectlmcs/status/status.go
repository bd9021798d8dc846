// Package status reads the state of a clusterset as an operator wants to see
// it: from the broker, each cluster's heartbeat, declaration, ClusterSetIP
// blocks, exports and conflicts (merged with the same function exporters
// and importers run); from one member, whether each cluster is live as that
// member's liveness ConfigMap says (what its nodes act on), and a service's
// ServiceImport and the endpoints it imports from each cluster. It only
// reads, with whatever credentials it is given: a member's own broker
// identity can read all of the broker's part.
package status

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
	mcsclient "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned"

	"github.com/mcsd-io/mcsd/broker"
	"github.com/mcsd-io/mcsd/internal/merge"
	"github.com/mcsd-io/mcsd/internal/record"
	"github.com/mcsd-io/mcsd/liveness"
	"github.com/mcsd-io/mcsd/vipalloc"
)

// Snapshot is what the broker namespace holds, read at one moment.
type Snapshot struct {
	Namespace string
	// Read is when the snapshot was taken, on the reader's clock.
	Read   time.Time
	Leases []coordinationv1.Lease
	// Declarations are the members' declarations that parse; Broken are
	// the errors of those that do not.
	Declarations []broker.Declaration
	Broken       []error
	// Records are the export records that decode; Invalid counts, per
	// cluster, those that do not.
	Records []record.Export
	Invalid map[string]int
	Claims  []vipalloc.Claim
}

// Clients reach one cluster, the broker or a member: the clusterset tools
// read and write with them.
type Clients struct {
	Kube    kubernetes.Interface
	MCS     mcsclient.Interface
	Dynamic dynamic.Interface
}

// NewClients returns the clients of the cluster cfg reaches.
func NewClients(cfg *rest.Config) (*Clients, error) {
	kube, kubeErr := kubernetes.NewForConfig(cfg)
	mcs, mcsErr := mcsclient.NewForConfig(cfg)
	dyn, dynErr := dynamic.NewForConfig(cfg)
	if err := errors.Join(kubeErr, mcsErr, dynErr); err != nil {
		return nil, err
	}
	return &Clients{Kube: kube, MCS: mcs, Dynamic: dyn}, nil
}

// Read takes a Snapshot of the broker of namespace: the members' Leases and
// records across their namespaces, the declarations and claims of the
// broker namespace.
func Read(ctx context.Context, kube kubernetes.Interface, mcs mcsclient.Interface, namespace string) (*Snapshot, error) {
	s := &Snapshot{Namespace: namespace, Read: time.Now(), Invalid: map[string]int{}}
	leases, err := kube.CoordinationV1().Leases(metav1.NamespaceAll).List(ctx, metav1.ListOptions{LabelSelector: record.LabelSourceCluster})
	if err != nil {
		return nil, fmt.Errorf("listing the broker's Leases: %w", err)
	}
	s.Leases = slices.DeleteFunc(leases.Items, func(l coordinationv1.Lease) bool { return !record.InMember(namespace, &l) })
	decls, err := kube.CoreV1().ConfigMaps(namespace).List(ctx, metav1.ListOptions{LabelSelector: broker.LabelDeclaration})
	if err != nil {
		return nil, fmt.Errorf("listing the members' declarations: %w", err)
	}
	s.Declarations = parseEach(decls.Items, broker.ParseDeclaration, func(_ *corev1.ConfigMap, err error) { s.Broken = append(s.Broken, err) })
	claims, err := kube.CoreV1().ConfigMaps(namespace).List(ctx, metav1.ListOptions{LabelSelector: vipalloc.LabelClaim})
	if err != nil {
		return nil, fmt.Errorf("listing the ClusterSetIP claims: %w", err)
	}
	s.Claims = parseEach(claims.Items, vipalloc.ParseClaim, nil)
	records, err := mcs.MulticlusterV1beta1().ServiceImports(metav1.NamespaceAll).List(ctx, metav1.ListOptions{LabelSelector: record.LabelSourceCluster})
	if err != nil {
		return nil, fmt.Errorf("listing the export records: %w", err)
	}
	records.Items = slices.DeleteFunc(records.Items, func(r mcsv1beta1.ServiceImport) bool { return !record.InMember(namespace, &r) })
	s.Records = parseEach(records.Items, record.Decode, func(r *mcsv1beta1.ServiceImport, _ error) {
		s.Invalid[r.Labels[record.LabelSourceCluster]]++
	})
	return s, nil
}

// parseEach parses every item with parse and returns what parses; bad
// (when set) is told of each item that does not, and why.
func parseEach[I, T any](items []I, parse func(*I) (T, error), bad func(*I, error)) []T {
	var out []T
	for i := range items {
		t, err := parse(&items[i])
		if err != nil {
			if bad != nil {
				bad(&items[i], err)
			}
			continue
		}
		out = append(out, t)
	}
	return out
}

// ReadLiveness reads the member's liveness ConfigMap in namespace (where
// mcsd runs): which clusters its importer judges live or gone, and whether
// the broker answers it. It returns nil when there is none (no importer
// runs there).
func ReadLiveness(ctx context.Context, kube kubernetes.Interface, namespace string) (*liveness.State, error) {
	cm, err := kube.CoreV1().ConfigMaps(namespace).Get(ctx, liveness.ConfigMapName, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("reading the liveness ConfigMap %s/%s: %w", namespace, liveness.ConfigMapName, err)
	}
	s := liveness.Read(cm)
	return &s, nil
}

// Cluster is one cluster as the broker knows it.
type Cluster struct {
	ID string `json:"id"`
	// State is what the member's liveness ConfigMap says of the cluster:
	// liveness.Live, liveness.Gone, or liveness.Unknown when it does not
	// name it (or there is none).
	State string `json:"state"`
	// RenewTime is the Lease's renewTime, as the cluster wrote it on its
	// own clock; LeaseAge is the reader's clock minus it.
	RenewTime       *time.Time    `json:"renewTime,omitempty"`
	LeaseAge        time.Duration `json:"-"`
	LeaseAgeSeconds float64       `json:"leaseAgeSeconds,omitempty"`
	// Exports counts the cluster's export records; Invalid those that do
	// not decode.
	Exports int `json:"exports"`
	Invalid int `json:"invalidRecords,omitempty"`
	// Conflicts counts the services whose merge gives this cluster's
	// export a Conflict.
	Conflicts int `json:"conflicts"`
	// Declared says the broker has a declaration of the cluster, with
	// PodCIDRs.
	Declared bool     `json:"declared"`
	PodCIDRs []string `json:"podCIDRs,omitempty"`
	// Blocks are the ClusterSetIP blocks the cluster owns.
	Blocks []string `json:"clusterSetIPBlocks,omitempty"`
	// Version is the version of the mcsd renewing the cluster's Lease, as
	// it writes it (empty for an mcsd older than that annotation).
	Version string `json:"version,omitempty"`
}

// Clusters lists every cluster that has a Lease, a declaration, a claim or
// a record on the broker, sorted by ID, each in the state live says (nil:
// Unknown, there is no liveness ConfigMap).
func (s *Snapshot) Clusters(live *liveness.State) []Cluster {
	byID := map[string]*Cluster{}
	get := func(id string) *Cluster {
		c, ok := byID[id]
		if !ok {
			c = &Cluster{ID: id, State: liveness.Unknown}
			if live != nil {
				c.State = live.Of(id)
			}
			byID[id] = c
		}
		return c
	}
	for _, l := range s.Leases {
		c := get(l.Labels[record.LabelSourceCluster])
		c.Version = l.Annotations[record.AnnotationLeaseVersion]
		if l.Spec.RenewTime != nil {
			t := l.Spec.RenewTime.Time
			c.RenewTime = &t
			c.LeaseAge = s.Read.Sub(t)
			c.LeaseAgeSeconds = c.LeaseAge.Seconds()
		}
	}
	for _, d := range s.Declarations {
		c := get(d.Cluster)
		c.Declared = true
		for _, p := range d.PodCIDRs {
			c.PodCIDRs = append(c.PodCIDRs, p.String())
		}
	}
	for _, o := range vipalloc.Owners(s.Claims) {
		c := get(o.Cluster)
		c.Blocks = append(c.Blocks, o.Block.String())
	}
	for _, r := range s.Records {
		get(r.Cluster).Exports++
	}
	for id, n := range s.Invalid {
		get(id).Invalid += n
	}
	for _, res := range s.merged() {
		for id, v := range res.Verdicts {
			if v.Conflict() {
				get(id).Conflicts++
			}
		}
	}
	out := make([]Cluster, 0, len(byID))
	for _, c := range byID {
		out = append(out, *c)
	}
	slices.SortFunc(out, func(a, b Cluster) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

// merged merges the records of each service.
func (s *Snapshot) merged() map[string]merge.Result {
	byService := map[string][]record.Export{}
	for _, r := range s.Records {
		k := record.ServiceKey(r.Namespace, r.Name)
		byService[k] = append(byService[k], r)
	}
	out := make(map[string]merge.Result, len(byService))
	for k, rs := range byService {
		if res, err := merge.Merge(rs); err == nil {
			out[k] = res
		}
	}
	return out
}

// Exporter is one cluster's export of a service, as the broker holds it.
type Exporter struct {
	Cluster string `json:"cluster"`
	// Precedence says the merge takes this export's type, affinity and
	// VIPs (the oldest export).
	Precedence bool     `json:"precedence,omitempty"`
	InService  bool     `json:"inService"`
	VIPs       []string `json:"vips,omitempty"`
	// Conflict is the reason of the export's Conflict verdict, "" when
	// there is none.
	Conflict string `json:"conflict,omitempty"`
}

// Import is the member's ServiceImport of a service.
type Import struct {
	Type       string             `json:"type"`
	IPs        []string           `json:"ips,omitempty"`
	Ports      []string           `json:"ports,omitempty"`
	Clusters   []string           `json:"clusters,omitempty"`
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// Endpoints are the endpoints a member imports from one cluster.
type Endpoints struct {
	Cluster  string   `json:"cluster"`
	Slices   int      `json:"slices"`
	Ready    int      `json:"ready"`
	NotReady int      `json:"notReady"`
	Addrs    []string `json:"addresses,omitempty"`
}

// Service is one service across the clusterset, as one member sees it.
type Service struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Exporters are read from the broker; empty when it was not read.
	Exporters []Exporter `json:"exporters,omitempty"`
	// Import is nil when the member has no ServiceImport of the service.
	Import    *Import     `json:"import,omitempty"`
	Endpoints []Endpoints `json:"endpoints,omitempty"`
}

// ReadService reads the service namespace/name from a member (its
// ServiceImport and MCS EndpointSlices) and, when s is not nil, which
// clusters export it from the broker snapshot s.
func ReadService(ctx context.Context, kube kubernetes.Interface, mcs mcsclient.Interface, s *Snapshot, namespace, name string) (*Service, error) {
	out := &Service{Namespace: namespace, Name: name}
	if s != nil {
		if res, ok := s.merged()[record.ServiceKey(namespace, name)]; ok {
			for _, r := range s.Records {
				if r.Namespace != namespace || r.Name != name {
					continue
				}
				e := Exporter{Cluster: r.Cluster, Precedence: res.Oldest == r.Cluster, InService: slices.Contains(res.Clusters, r.Cluster), VIPs: r.VIPs}
				if v, _ := res.Verdict(r.Cluster); v.Conflict() {
					e.Conflict = v.Reason()
				}
				out.Exporters = append(out.Exporters, e)
			}
			slices.SortFunc(out.Exporters, func(a, b Exporter) int { return cmp.Compare(a.Cluster, b.Cluster) })
		}
	}
	si, err := mcs.MulticlusterV1beta1().ServiceImports(namespace).Get(ctx, name, metav1.GetOptions{})
	switch {
	case err == nil:
		imp := &Import{Type: string(si.Spec.Type), IPs: si.Spec.IPs, Conditions: si.Status.Conditions}
		for _, p := range si.Spec.Ports {
			imp.Ports = append(imp.Ports, portString(p))
		}
		for _, c := range si.Status.Clusters {
			imp.Clusters = append(imp.Clusters, c.Cluster)
		}
		out.Import = imp
	case !isNotFound(err):
		return nil, fmt.Errorf("reading ServiceImport %s/%s: %w", namespace, name, err)
	}
	list, err := kube.DiscoveryV1().EndpointSlices(namespace).List(ctx, metav1.ListOptions{
		LabelSelector: mcsv1beta1.LabelServiceName + "=" + name + "," + mcsv1beta1.LabelSourceCluster,
	})
	if err != nil {
		return nil, fmt.Errorf("listing the MCS EndpointSlices of %s/%s: %w", namespace, name, err)
	}
	byCluster := map[string]*Endpoints{}
	for _, sl := range list.Items {
		id := sl.Labels[mcsv1beta1.LabelSourceCluster]
		e, ok := byCluster[id]
		if !ok {
			e = &Endpoints{Cluster: id}
			byCluster[id] = e
		}
		e.Slices++
		for _, ep := range sl.Endpoints {
			if ready(ep) {
				e.Ready++
			} else {
				e.NotReady++
			}
			e.Addrs = append(e.Addrs, ep.Addresses...)
		}
	}
	for _, e := range byCluster {
		sortAddrs(e.Addrs)
		out.Endpoints = append(out.Endpoints, *e)
	}
	sortEndpoints(out.Endpoints)
	return out, nil
}

func ready(ep discoveryv1.Endpoint) bool {
	return ep.Conditions.Ready == nil || *ep.Conditions.Ready
}

func portString(p mcsv1beta1.ServicePort) string {
	s := fmt.Sprintf("%d/%s", p.Port, p.Protocol)
	if p.Name != "" {
		s = p.Name + ":" + s
	}
	return s
}

func sortAddrs(addrs []string) {
	slices.SortFunc(addrs, func(a, b string) int {
		x, errX := netip.ParseAddr(a)
		y, errY := netip.ParseAddr(b)
		if errX == nil && errY == nil {
			return x.Compare(y)
		}
		return cmp.Compare(a, b)
	})
}

func sortEndpoints(es []Endpoints) {
	slices.SortFunc(es, func(a, b Endpoints) int { return cmp.Compare(a.Cluster, b.Cluster) })
}

func isNotFound(err error) bool { return apierrors.IsNotFound(err) }
