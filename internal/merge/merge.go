// Package merge derives one multi-cluster service from the export records of
// every cluster that exports it: the ServiceImport spec, the exported labels
// and annotations, the clusters whose endpoints belong to it, and every
// export's Conflict verdict. The exporter (for ServiceExport conditions) and
// the importer (for ServiceImports) call the same function on the same
// records, so every cluster reaches the same answer without coordinating.
//
// Merge is pure: it reads no clock, talks to no API server and keeps no
// state. It never decides which records are current (stale clusters are
// the importer's business) and never allocates ClusterSetIPs; it says which
// IP families still lack one.
package merge

import (
	"cmp"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/mcsd-io/mcsd/internal/record"
)

// Result is the service derived from all exports of one namespace/name.
type Result struct {
	// Spec is the ServiceImport spec every cluster imports.
	Spec mcsv1beta1.ServiceImportSpec
	// Labels and Annotations are the exported labels and annotations of
	// the export with precedence, for the ServiceImport's metadata.
	Labels      map[string]string
	Annotations map[string]string
	// Clusters are the IDs of the clusters whose endpoints belong to the
	// service (those of Spec.Type with an IP family of Spec.IPFamilies),
	// sorted: the ServiceImport's status.clusters.
	Clusters []string
	// Oldest is the ID of the cluster whose export has precedence.
	Oldest string
	// Verdicts holds every exporting cluster's Conflict verdict, by
	// cluster ID, the clusters left out of Clusters included.
	Verdicts map[string]Verdict
	// MissingVIPFamilies are the IP families of a ClusterSetIP service
	// with ClusterSetIPs enabled for which no contributing record holds a
	// VIP yet, in Spec.IPFamilies order. While it is not empty, Spec.IPs
	// is shorter than Spec.IPFamilies.
	MissingVIPFamilies []corev1.IPFamily
}

// Compare orders exports by precedence: the oldest ServiceExport first
// (creation times compared to the second, the precision records keep),
// ties broken by cluster ID in string order. It returns a negative number
// when a has precedence over b.
func Compare(a, b record.Export) int {
	return cmp.Or(
		a.Created.UTC().Truncate(time.Second).Compare(b.Created.UTC().Truncate(time.Second)),
		strings.Compare(a.Cluster, b.Cluster),
	)
}

// Merge derives the service from records, the exports of one namespace/name
// by distinct clusters, in any order: the same records give the same Result
// whatever their order. No records give a zero Result: nothing is exported.
// Records of several services, or two records of one cluster, are an error.
//
// The rules, each applied in precedence order (see Compare):
//   - type, sessionAffinity, sessionAffinityConfig, internalTrafficPolicy,
//     trafficDistribution, exported labels and exported annotations are
//     those of the oldest export;
//   - only exports of that type contribute: a cluster of the other type
//     is in TypeConflict and left out of Clusters (its endpoints with it);
//   - ports are the union of the contributing exports' ports; a port whose
//     name, or whose (port, protocol), an older export already uses for a
//     different port is left out;
//   - ipFamilies are the oldest's: a later export cannot take a family
//     away from the service (narrow a dual-stack service to one family
//     everywhere) nor add one; an export with none of those families is
//     left out of Clusters too, and one with only some contributes in
//     those;
//   - a ClusterSetIP service gets, per family, the VIP of the oldest
//     contributing export that holds one, unless the oldest export opted
//     out of ClusterSetIPs; a Headless service has no IPs.
//
// A field is in conflict when some export's value differs from the derived
// one (ports and ipFamilies compared as sets). Every export of the service
// then gets the field's reason in its verdict, the oldest one included, as
// the KEP asks of all ServiceExports of a conflicted service.
func Merge(records []record.Export) (Result, error) {
	if len(records) == 0 {
		return Result{}, nil
	}
	if err := checkOneServiceOneRecordPerCluster(records); err != nil {
		return Result{}, err
	}
	all := slices.Clone(records)
	slices.SortFunc(all, Compare)
	oldest := all[0]

	var contributing []record.Export
	for _, r := range all {
		if r.Type == oldest.Type {
			contributing = append(contributing, r)
		}
	}
	families := familiesOf(oldest)
	// An export with none of the service's families has no endpoints the
	// service could use.
	contributing = slices.DeleteFunc(contributing, func(r record.Export) bool {
		return !slices.ContainsFunc(r.IPFamilies, func(f corev1.IPFamily) bool { return slices.Contains(families, f) })
	})
	ports := unionPorts(contributing)
	res := Result{
		Spec: mcsv1beta1.ServiceImportSpec{
			Ports:                 ports,
			Type:                  oldest.Type,
			SessionAffinity:       oldest.SessionAffinity,
			SessionAffinityConfig: oldest.SessionAffinityConfig.DeepCopy(),
			IPFamilies:            families,
			InternalTrafficPolicy: clonePtr(oldest.InternalTrafficPolicy),
			TrafficDistribution:   clonePtr(oldest.TrafficDistribution),
		},
		Labels:      maps.Clone(oldest.ExportedLabels),
		Annotations: maps.Clone(oldest.ExportedAnnotations),
		Oldest:      oldest.Cluster,
		Verdicts:    make(map[string]Verdict, len(all)),
	}
	inService := map[string]bool{}
	for _, r := range contributing {
		res.Clusters = append(res.Clusters, r.Cluster)
		inService[r.Cluster] = true
	}
	slices.Sort(res.Clusters)
	if oldest.Type == mcsv1beta1.ClusterSetIP && !oldest.ClusterSetIPDisabled {
		res.Spec.IPs, res.MissingVIPFamilies = pickVIPs(contributing, families)
	}

	conflicts := findConflicts(all, oldest, ports, families)
	for _, r := range all {
		res.Verdicts[r.Cluster] = verdictFor(r, oldest, families, inService[r.Cluster], len(all), conflicts)
	}
	return res, nil
}

// Verdict returns cluster's verdict, and false when cluster does not export
// the service.
func (r Result) Verdict(cluster string) (Verdict, bool) {
	v, ok := r.Verdicts[cluster]
	return v, ok
}

func checkOneServiceOneRecordPerCluster(records []record.Export) error {
	services := map[string]bool{}
	count := map[string]int{}
	for _, r := range records {
		services[r.Namespace+"/"+r.Name] = true
		count[r.Cluster]++
	}
	if len(services) > 1 {
		return fmt.Errorf("merging exports of several services (%s): a merge takes the exports of one service",
			strings.Join(slices.Sorted(maps.Keys(services)), ", "))
	}
	for _, c := range slices.Sorted(maps.Keys(count)) {
		if count[c] > 1 {
			return fmt.Errorf("merging %d exports of %s/%s by cluster %q: a cluster exports a service once",
				count[c], records[0].Namespace, records[0].Name, c)
		}
	}
	return nil
}

// unionPorts is the union of the contributing exports' ports, normalized
// and sorted (see sortPorts). Going through the exports in precedence
// order, a port is left out when an older export already has a different
// port of the same name, or of the same (port, protocol): a Service could
// not have both either.
func unionPorts(contributing []record.Export) []mcsv1beta1.ServicePort {
	out := []mcsv1beta1.ServicePort{}
	names := map[string]bool{}
	numbers := map[string]bool{}
	for _, r := range contributing {
		for _, p := range r.Ports {
			p = normalizePort(p)
			if names[p.Name] || numbers[numberOf(p)] {
				continue
			}
			names[p.Name] = true
			numbers[numberOf(p)] = true
			out = append(out, p)
		}
	}
	sortPorts(out)
	return out
}

// normalizePort returns a copy of p with the API's defaults spelled out:
// protocol TCP when empty, no appProtocol when empty.
func normalizePort(p mcsv1beta1.ServicePort) mcsv1beta1.ServicePort {
	if p.Protocol == "" {
		p.Protocol = corev1.ProtocolTCP
	}
	if p.AppProtocol != nil && *p.AppProtocol == "" {
		p.AppProtocol = nil
	}
	p.AppProtocol = clonePtr(p.AppProtocol)
	return p
}

// sortPorts orders ports by number, protocol, name and appProtocol.
func sortPorts(ports []mcsv1beta1.ServicePort) { slices.SortFunc(ports, comparePorts) }

func comparePorts(a, b mcsv1beta1.ServicePort) int {
	return cmp.Or(
		cmp.Compare(a.Port, b.Port),
		cmp.Compare(a.Protocol, b.Protocol),
		cmp.Compare(a.Name, b.Name),
		cmp.Compare(deref(a.AppProtocol), deref(b.AppProtocol)),
	)
}

func numberOf(p mcsv1beta1.ServicePort) string { return fmt.Sprintf("%d/%s", p.Port, p.Protocol) }

// portSet is ports normalized and sorted, for comparing sets of ports.
func portSet(ports []mcsv1beta1.ServicePort) []mcsv1beta1.ServicePort {
	out := make([]mcsv1beta1.ServicePort, 0, len(ports))
	for _, p := range ports {
		out = append(out, normalizePort(p))
	}
	sortPorts(out)
	return out
}

func samePort(a, b mcsv1beta1.ServicePort) bool {
	return a.Name == b.Name && a.Protocol == b.Protocol && a.Port == b.Port && deref(a.AppProtocol) == deref(b.AppProtocol)
}

// familiesOf returns the oldest export's families, each once, in its
// order: the service's. Taking them from the oldest, as every other
// property, keeps a later export from removing a family the service
// already has: with the families every export shares instead, one
// IPv6-only export would narrow a dual-stack service to IPv6 in every
// cluster, and take its IPv4 ClusterSetIP and endpoints away.
func familiesOf(oldest record.Export) []corev1.IPFamily {
	var out []corev1.IPFamily
	for _, f := range oldest.IPFamilies {
		if !slices.Contains(out, f) {
			out = append(out, f)
		}
	}
	return out
}

func sameFamilies(a, b []corev1.IPFamily) bool {
	for _, f := range a {
		if !slices.Contains(b, f) {
			return false
		}
	}
	for _, f := range b {
		if !slices.Contains(a, f) {
			return false
		}
	}
	return true
}

// pickVIPs takes, for each family, the VIP of that family of the oldest
// contributing export that holds one and has ClusterSetIPs enabled. The
// families no export holds a VIP of are returned as missing.
func pickVIPs(contributing []record.Export, families []corev1.IPFamily) (ips []string, missing []corev1.IPFamily) {
	for _, f := range families {
		if vip, ok := vipOf(contributing, f); ok {
			ips = append(ips, vip)
		} else {
			missing = append(missing, f)
		}
	}
	return ips, missing
}

func vipOf(contributing []record.Export, family corev1.IPFamily) (string, bool) {
	for _, r := range contributing {
		if r.ClusterSetIPDisabled {
			continue
		}
		for _, v := range r.VIPs {
			ip, err := netip.ParseAddr(v)
			if err == nil && record.FamilyOf(ip) == family {
				return ip.Unmap().String(), true
			}
		}
	}
	return "", false
}

func clonePtr[T any](p *T) *T {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

// equalMaps treats nil and empty maps as equal.
func equalMaps(a, b map[string]string) bool { return maps.Equal(a, b) }

// equalConfig compares session affinity configs by value.
func equalConfig(a, b *corev1.SessionAffinityConfig) bool {
	return apiequality.Semantic.DeepEqual(a, b)
}
