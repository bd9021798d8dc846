package importer

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/mcsd-io/mcsd/internal/endpointgroup"
	"github.com/mcsd-io/mcsd/internal/record"
	"github.com/mcsd-io/mcsd/proxier"
)

// source is one live contributing cluster's part of a service: its export
// record and its broker EndpointSlices.
type source struct {
	export record.Export
	slices []*discoveryv1.EndpointSlice
}

// desiredSlices computes the local MCS EndpointSlices of one service: for
// each source cluster and each of the service's address families, that
// cluster's broker endpoints, endpoints with the same ports together, at
// most endpointgroup.MaxPerSlice per slice. Each slice holds one cluster's
// endpoints only, names it in multicluster.kubernetes.io/source-cluster,
// is owned by the ServiceImport and says in proxier.ServicePortsAnnotation
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
		ports := proxier.ServicePorts{}
		for _, p := range src.export.Ports {
			ports.Add(p.Name, p.Protocol, p.Port)
		}
		portsValue := ports.Encode()

		groups := endpointgroup.Of(src.slices, endpointgroup.Options{
			// Endpoints of a family the service does not have cannot be
			// reached through it.
			Family: func(f discoveryv1.AddressType) bool { return families[f] },
		})
		index := map[discoveryv1.AddressType]int{}
		for _, g := range groups {
			// A group without endpoints still gets its (empty) slice: the
			// cluster exports the service in that family.
			for _, eps := range g.Chunks() {
				out = append(out, &discoveryv1.EndpointSlice{
					ObjectMeta: metav1.ObjectMeta{
						Name:            SliceName(si.Name, cluster, g.Family, index[g.Family]),
						Namespace:       si.Namespace,
						Labels:          sliceLabels(si.Name, cluster),
						Annotations:     map[string]string{proxier.ServicePortsAnnotation: portsValue},
						OwnerReferences: []metav1.OwnerReference{owner},
					},
					AddressType: g.Family,
					Endpoints:   eps,
					Ports:       g.Ports,
				})
				index[g.Family]++
			}
		}
	}
	return out
}

// SliceName is the name of the index-th local EndpointSlice holding
// cluster's endpoints of the service in one address family:
// "<service>.<cluster>.<family>-<index>", for example "cart.east.ipv4-0".
// Service names and cluster IDs are RFC 1123 labels without dots, so the
// name is unique in the namespace and never equals a core EndpointSlice's
// ("<service>-<random>"). Should it not be a valid name, it is a readable
// prefix and a hash of the parts instead.
func SliceName(service, cluster string, family discoveryv1.AddressType, index int) string {
	suffix := strings.ToLower(string(family)) + "-" + strconv.Itoa(index)
	name := service + "." + cluster + "." + suffix
	if len(validation.IsDNS1123Label(service)) == 0 && len(validation.IsDNS1123Label(cluster)) == 0 &&
		len(validation.IsDNS1123Subdomain(name)) == 0 {
		return name
	}
	sum := sha256.Sum256([]byte(service + "\x00" + cluster + "\x00" + suffix))
	var b strings.Builder
	for _, r := range strings.ToLower(service + "-" + cluster) {
		if b.Len() >= 100 {
			break
		}
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
		} else {
			b.WriteByte('-')
		}
	}
	prefix := strings.Trim(b.String(), "-")
	if prefix != "" {
		prefix += "-"
	}
	return prefix + hex.EncodeToString(sum[:])[:40] + "-" + suffix
}

// sliceLabels are the labels of a local MCS EndpointSlice: the two
// mcs-api labels and the importer's managed-by, never
// kubernetes.io/service-name (kube-proxy must not take it for a Service's).
func sliceLabels(service, cluster string) map[string]string {
	return map[string]string{
		mcsv1beta1.LabelServiceName:   service,
		mcsv1beta1.LabelSourceCluster: cluster,
		discoveryv1.LabelManagedBy:    EndpointSliceManager,
	}
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
		apiequality.Semantic.DeepEqual(have.Endpoints, want.Endpoints) &&
		apiequality.Semantic.DeepEqual(have.Ports, want.Ports)
}

// sliceWriters is how many of one service's EndpointSlice writes are made
// at once.
const sliceWriters = 4

// writeSlices makes the service's local MCS EndpointSlices match the live
// contributing clusters' broker slices: slices are updated in place, and
// only extras are deleted (none while the broker is unreachable). The
// writes are independent and made concurrently.
func (c *Controller) writeSlices(ctx context.Context, si *mcsv1beta1.ServiceImport, live []string, exports map[string]record.Export) error {
	key := si.Namespace + "/" + si.Name
	remote, err := c.remoteSlices.ByIndex(byService, key)
	if err != nil {
		return err
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
	for _, cluster := range live {
		sources = append(sources, source{export: exports[cluster], slices: byCluster[cluster]})
	}
	want := desiredSlices(si, sources)

	own, err := c.ownCache.ByIndex(byService, key)
	if err != nil {
		return err
	}
	have := map[string]*discoveryv1.EndpointSlice{}
	for _, o := range own {
		if s, ok := o.(*discoveryv1.EndpointSlice); ok {
			have[s.Name] = s
		}
	}
	var writes []func() error
	for _, w := range want {
		cur, ok := have[w.Name]
		delete(have, w.Name)
		switch {
		case !ok:
			writes = append(writes, func() error { return c.createSlice(ctx, w) })
		case cur.AddressType != w.AddressType:
			// The address type cannot change: replace the slice.
			writes = append(writes, func() error { return c.deleteSlice(ctx, cur) })
		case !sliceUpToDate(cur, w):
			writes = append(writes, func() error { return c.updateSlice(ctx, cur, w) })
		}
	}
	if len(have) > 0 {
		if since, down := c.brokerDown(); down {
			klog.FromContext(ctx).V(2).Info("Not deleting EndpointSlices while the broker is unreachable", "slices", len(have), "lastContact", since)
			clear(have)
		}
	}
	for _, extra := range have {
		writes = append(writes, func() error { return c.deleteSlice(ctx, extra) })
	}
	return concurrently(writes, sliceWriters)
}

// concurrently runs fns, at most n at a time, and joins their errors.
func concurrently(fns []func() error, n int) error {
	if len(fns) == 1 {
		return fns[0]()
	}
	errs := make([]error, len(fns))
	sem := make(chan struct{}, n)
	var wg sync.WaitGroup
	for i, fn := range fns {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			errs[i] = fn()
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

func (c *Controller) createSlice(ctx context.Context, w *discoveryv1.EndpointSlice) error {
	api := c.cfg.Local.DiscoveryV1().EndpointSlices(w.Namespace)
	created, err := api.Create(ctx, w, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		// Written before this importer's cache knew of it (a restart, or a
		// write the watch has not delivered): read it and bring it up to date.
		cur, err := api.Get(ctx, w.Name, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("reading EndpointSlice %s/%s, which exists but is not cached yet: %w", w.Namespace, w.Name, err)
		}
		if sliceUpToDate(cur, w) {
			c.ownCache.Mutation(cur)
			return nil
		}
		return c.updateSlice(ctx, cur, w)
	}
	if err != nil {
		return fmt.Errorf("creating EndpointSlice %s/%s: %w", w.Namespace, w.Name, err)
	}
	c.cfg.Metrics.wrote("endpointslice", "create")
	c.ownCache.Mutation(created)
	return nil
}

// updateSlice makes cur hold want's endpoints, ports, owner and the
// importer's labels and annotation, keeping labels and annotations of
// others.
func (c *Controller) updateSlice(ctx context.Context, cur, want *discoveryv1.EndpointSlice) error {
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
	upd.OwnerReferences, upd.Endpoints, upd.Ports = want.OwnerReferences, want.Endpoints, want.Ports
	updated, err := c.cfg.Local.DiscoveryV1().EndpointSlices(upd.Namespace).Update(ctx, upd, metav1.UpdateOptions{})
	if err != nil {
		return fmt.Errorf("updating EndpointSlice %s/%s: %w", upd.Namespace, upd.Name, err)
	}
	c.cfg.Metrics.wrote("endpointslice", "update")
	c.ownCache.Mutation(updated)
	return nil
}
