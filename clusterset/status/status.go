// Package status reads the state of a clusterset as an operator wants to see
// it: from the broker, each cluster's heartbeat, declaration, ClusterSetIP
// blocks, exports and conflicts (merged with the same function exporters
// and importers run); from one member, a service's ServiceImport and the
// endpoints it imports from each cluster. It only reads, with whatever
// credentials it is given: a member's own broker identity can read all of
// it.
package status

import (
	"cmp"
	"context"
	"fmt"
	"net/netip"
	"slices"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
	mcsclient "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned"

	"github.com/mcsd-io/mcsd/broker"
	"github.com/mcsd-io/mcsd/clustersetip"
	"github.com/mcsd-io/mcsd/internal/merge"
	"github.com/mcsd-io/mcsd/internal/record"
)

// DefaultClusterTTL is mcsd's default --cluster-ttl: a cluster whose Lease
// was not renewed for this long is dead to importers.
const DefaultClusterTTL = 10 * time.Second

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
	Claims  []clustersetip.Claim
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
	for _, l := range leases.Items {
		if record.InMember(namespace, &l) {
			s.Leases = append(s.Leases, l)
		}
	}
	decls, err := kube.CoreV1().ConfigMaps(namespace).List(ctx, metav1.ListOptions{LabelSelector: broker.LabelDeclaration})
	if err != nil {
		return nil, fmt.Errorf("listing the members' declarations: %w", err)
	}
	for i := range decls.Items {
		d, err := broker.ParseDeclaration(&decls.Items[i])
		if err != nil {
			s.Broken = append(s.Broken, err)
			continue
		}
		s.Declarations = append(s.Declarations, d)
	}
	claims, err := kube.CoreV1().ConfigMaps(namespace).List(ctx, metav1.ListOptions{LabelSelector: clustersetip.LabelClaim})
	if err != nil {
		return nil, fmt.Errorf("listing the ClusterSetIP claims: %w", err)
	}
	for i := range claims.Items {
		if c, err := clustersetip.ParseClaim(&claims.Items[i]); err == nil {
			s.Claims = append(s.Claims, c)
		}
	}
	records, err := mcs.MulticlusterV1beta1().ServiceImports(metav1.NamespaceAll).List(ctx, metav1.ListOptions{LabelSelector: record.LabelSourceCluster})
	if err != nil {
		return nil, fmt.Errorf("listing the export records: %w", err)
	}
	for i := range records.Items {
		if !record.InMember(namespace, &records.Items[i]) {
			continue
		}
		e, err := record.Decode(&records.Items[i])
		if err != nil {
			s.Invalid[records.Items[i].Labels[record.LabelSourceCluster]]++
			continue
		}
		s.Records = append(s.Records, e)
	}
	return s, nil
}

// Lease states of a cluster.
const (
	Alive   = "Alive"
	Dead    = "Dead"
	NoLease = "NoLease"
)

// Cluster is one cluster as the broker knows it.
type Cluster struct {
	ID string `json:"id"`
	// State is Alive, Dead (its Lease was not renewed within the TTL) or
	// NoLease.
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
// a record on the broker, sorted by ID, with its liveness by ttl.
func (s *Snapshot) Clusters(ttl time.Duration) []Cluster {
	byID := map[string]*Cluster{}
	get := func(id string) *Cluster {
		c, ok := byID[id]
		if !ok {
			c = &Cluster{ID: id, State: NoLease}
			byID[id] = c
		}
		return c
	}
	for _, l := range s.Leases {
		c := get(l.Labels[record.LabelSourceCluster])
		c.Version = l.Annotations[record.AnnotationLeaseVersion]
		if l.Spec.RenewTime == nil {
			c.State = Dead
			continue
		}
		t := l.Spec.RenewTime.Time
		c.RenewTime = &t
		c.LeaseAge = s.Read.Sub(t)
		c.LeaseAgeSeconds = c.LeaseAge.Seconds()
		c.State = Alive
		if c.LeaseAge > ttl {
			c.State = Dead
		}
	}
	for _, d := range s.Declarations {
		c := get(d.Cluster)
		c.Declared = true
		for _, p := range d.PodCIDRs {
			c.PodCIDRs = append(c.PodCIDRs, p.String())
		}
	}
	for _, o := range clustersetip.Owners(s.Claims) {
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
