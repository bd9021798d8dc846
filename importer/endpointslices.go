package importer

import (
	"cmp"
	"context"
	"slices"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/mcsd-io/mcsd/broker"
	"github.com/mcsd-io/mcsd/internal/endpointgroup"
	"github.com/mcsd-io/mcsd/internal/record"
	"github.com/mcsd-io/mcsd/internal/sliceapply"
	"github.com/mcsd-io/mcsd/mcsslice"
)

// source is one live contributing cluster's part of a service: its export
// record and its broker EndpointSlices.
type source struct {
	export record.Export
	slices []*discoveryv1.EndpointSlice
	// keep, when set, says which endpoints are imported (those inside the
	// cluster's declared pod CIDRs).
	keep func(discoveryv1.Endpoint) bool
	// remote: the source is another cluster, whose endpoints are stripped
	// of what names its topology (see remoteEndpoint).
	remote bool
}

// desiredSlices computes the local MCS EndpointSlices of one service: for
// each source cluster and each of the service's address families, that
// cluster's broker endpoints, endpoints with the same ports together, at
// most endpointgroup.MaxPerSlice per slice. Each slice holds one cluster's
// endpoints only, names it in multicluster.kubernetes.io/source-cluster,
// is owned by the ServiceImport and says in mcsslice.ServicePortsAnnotation
// which port numbers that cluster's Service has. The result is
// deterministic, so an unchanged service yields unchanged slices.
func desiredSlices(si *mcsv1beta1.ServiceImport, sources []source) []*discoveryv1.EndpointSlice {
	families := map[discoveryv1.AddressType]bool{}
	for _, f := range si.Spec.IPFamilies {
		families[addressType(f)] = true
	}
	owner := metav1.OwnerReference{
		APIVersion: mcsv1beta1.GroupVersion.String(),
		Kind:       mcsv1beta1.ServiceImportKindName,
		Name:       si.Name,
		UID:        si.UID,
		Controller: ptr.To(true),
	}
	ordered := slices.Clone(sources)
	slices.SortFunc(ordered, func(a, b source) int { return cmp.Compare(a.export.Cluster, b.export.Cluster) })

	var out []*discoveryv1.EndpointSlice
	for _, src := range ordered {
		cluster := src.export.Cluster
		ports := mcsslice.ServicePorts{}
		for _, p := range src.export.Ports {
			ports.Add(p.Name, p.Protocol, p.Port)
		}
		portsValue := ports.Encode()

		opts := endpointgroup.Options{
			// Endpoints of a family the service does not have cannot be
			// reached through it.
			Family: func(f discoveryv1.AddressType) bool { return families[f] },
			Keep:   src.keep,
		}
		if src.remote {
			opts.Endpoint = remoteEndpoint
		}
		// A group without endpoints still gets its (empty) slice: the
		// cluster exports the service in that family.
		out = append(out, endpointgroup.Slices(endpointgroup.Of(src.slices, opts), endpointgroup.MaxPerSlice, func(family discoveryv1.AddressType, index int) metav1.ObjectMeta {
			return metav1.ObjectMeta{
				Name:            mcsslice.Name(si.Name, cluster, family, index),
				Namespace:       si.Namespace,
				Labels:          mcsslice.Labels(si.Name, cluster),
				Annotations:     map[string]string{mcsslice.ServicePortsAnnotation: portsValue},
				OwnerReferences: []metav1.OwnerReference{owner},
			}
		})...)
	}
	return out
}

func addressType(f corev1.IPFamily) discoveryv1.AddressType {
	if f == corev1.IPv6Protocol {
		return discoveryv1.AddressTypeIPv6
	}
	return discoveryv1.AddressTypeIPv4
}

// sliceUpToDate reports whether have already holds what want says: the
// importer's labels and annotation, its owner reference, no
// kubernetes.io/service-name, and the same endpoints and ports. Labels and
// annotations of others are ignored.
func sliceUpToDate(have, want *discoveryv1.EndpointSlice) bool {
	for k, v := range want.Labels {
		if have.Labels[k] != v {
			return false
		}
	}
	if _, ok := have.Labels[discoveryv1.LabelServiceName]; ok {
		return false
	}
	for k, v := range want.Annotations {
		if have.Annotations[k] != v {
			return false
		}
	}
	return have.AddressType == want.AddressType &&
		apiequality.Semantic.DeepEqual(have.OwnerReferences, want.OwnerReferences) &&
		contentDigest(have) == contentDigest(want)
}

// remoteEndpoint is what the importer writes locally of another cluster's
// endpoint: its addresses, conditions, hostname and zone, without nodeName,
// targetRef and hints. Those name the other cluster's nodes and pods: here
// they would name nothing, or, worse, a local node (internalTrafficPolicy
// Local picks endpoints by nodeName) or a local pod. The zone stays: it is
// informational, and nothing local routes on another cluster's zones.
func remoteEndpoint(ep discoveryv1.Endpoint) discoveryv1.Endpoint {
	out := *ep.DeepCopy()
	out.NodeName, out.TargetRef, out.Hints = nil, nil, nil
	return out
}

// sourcesOf gathers the broker slices of the service's live contributing
// clusters, with each cluster's endpoint check, and what the checks drop.
func (c *Controller) sourcesOf(key string, live []string, exports map[string]record.Export) ([]source, []rejection, error) {
	remote, err := c.remoteSlices.ByIndex(byService, key)
	if err != nil {
		return nil, nil, err
	}
	byCluster := map[string][]*discoveryv1.EndpointSlice{}
	for _, o := range remote {
		s, ok := o.(*discoveryv1.EndpointSlice)
		if !ok {
			continue
		}
		cluster := s.Labels[record.LabelSourceCluster]
		byCluster[cluster] = append(byCluster[cluster], s)
	}
	var sources []source
	var dropped []rejection
	for _, cluster := range live {
		src := source{export: exports[cluster], slices: byCluster[cluster], remote: cluster != c.cfg.ClusterID}
		if len(src.slices) > 0 {
			var d *broker.Declaration
			src.keep, d = c.endpointFilter(cluster)
			if r, ok := checkEndpoints(cluster, src.slices, src.keep, d); ok {
				dropped = append(dropped, r)
			}
		}
		sources = append(sources, src)
	}
	return sources, dropped, nil
}

// writeSlices makes the service's local MCS EndpointSlices hold the
// sources' endpoints: slices are updated in place, and only extras are
// deleted (none while the broker is unreachable).
func (c *Controller) writeSlices(ctx context.Context, si *mcsv1beta1.ServiceImport, sources []source) error {
	key := si.Namespace + "/" + si.Name
	want := desiredSlices(si, sources)
	have, err := c.ownSlicesOf(key)
	if err != nil {
		return err
	}
	keepExtras := false
	if since, down := c.live.BrokerDown(); down && len(have) > len(want) {
		klog.FromContext(ctx).V(2).Info("Not deleting EndpointSlices while the broker is unreachable", "lastContact", since)
		keepExtras = true
	}
	return c.slices.Apply(ctx, si.Namespace, want, have, keepExtras)
}

// ownSlicesOf returns the importer's slices of a service, as its cache
// has them or as it last wrote them.
func (c *Controller) ownSlicesOf(key string) ([]*discoveryv1.EndpointSlice, error) {
	objs, err := c.ownCache.ByIndex(byService, key)
	if err != nil {
		return nil, err
	}
	out := make([]*discoveryv1.EndpointSlice, 0, len(objs))
	for _, o := range objs {
		if s, ok := o.(*discoveryv1.EndpointSlice); ok {
			out = append(out, s)
		}
	}
	return out, nil
}

// sliceApplier writes the importer's slices: its own rules for what is up
// to date and what an update keeps, its metrics, and its writes laid over
// its cache.
func (c *Controller) sliceApplier() sliceapply.Applier {
	return sliceapply.Applier{
		Client:   c.cfg.Local,
		What:     "EndpointSlice",
		UpToDate: sliceUpToDate,
		Update:   sliceUpdate,
		Metrics:  c.Metrics,
		Wrote: func(operation string, s *discoveryv1.EndpointSlice) {
			if operation != "delete" {
				c.ownCache.Mutation(s)
			}
		},
	}
}

// sliceUpdate is cur with want's endpoints, ports, owner and the
// importer's labels and annotation, keeping labels and annotations of
// others.
func sliceUpdate(cur, want *discoveryv1.EndpointSlice) *discoveryv1.EndpointSlice {
	upd := cur.DeepCopy()
	if upd.Labels == nil {
		upd.Labels = map[string]string{}
	}
	delete(upd.Labels, discoveryv1.LabelServiceName)
	for k, v := range want.Labels {
		upd.Labels[k] = v
	}
	if upd.Annotations == nil {
		upd.Annotations = map[string]string{}
	}
	for k, v := range want.Annotations {
		upd.Annotations[k] = v
	}
	delete(upd.Annotations, contentDigestAnnotation)
	upd.OwnerReferences, upd.Endpoints, upd.Ports = want.OwnerReferences, want.Endpoints, want.Ports
	return upd
}
