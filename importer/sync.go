package importer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/mcsd-io/mcsd/internal/merge"
	"github.com/mcsd-io/mcsd/internal/record"
)

// sync makes this cluster import one service exactly as the broker's
// records say: the ServiceImport, its status and its EndpointSlices. It is
// idempotent: with nothing changed it writes nothing.
func (c *Controller) sync(ctx context.Context, namespace, name string) error {
	logger := klog.FromContext(ctx)
	key := record.ServiceKey(namespace, name)
	si, err := c.cachedImport(key)
	if err != nil {
		return err
	}
	if c.serviceDenied(namespace, name) {
		// Never imported; one imported before it was denied goes.
		logger.V(4).Info("Not importing: the service or its namespace is denied")
		return c.remove(ctx, namespace, name, si)
	}
	exports, err := c.exportsOf(ctx, namespace, name)
	if err != nil {
		return err
	}
	exports, rejected := c.checkExportRules(exports)
	if len(exports) == 0 {
		// Said (logged and counted) after the removal, which forgets what
		// was said of the service, so that it is said once.
		err := c.remove(ctx, namespace, name, si)
		c.noteRejections(ctx, key, rejected)
		return err
	}
	exports, vipRejected := c.checkVIPs(exports)
	rejected = append(rejected, vipRejected...)
	res, err := merge.Merge(exports)
	if err != nil {
		return fmt.Errorf("merging the records of %s: %w", key, err)
	}
	if !c.namespaceUsable(namespace) {
		// Namespace sameness: imported only where the namespace exists. A
		// terminating namespace takes its ServiceImport with it.
		logger.V(4).Info("Not importing: the namespace does not exist or is terminating")
		return nil
	}

	live := c.liveClusters(res.Clusters)
	served := familiesServed(res.Spec.IPFamilies, c.cfg.IPFamilies)
	if !served {
		// Nothing here could reach the service: its ServiceImport says so
		// and carries no ClusterSetIP, and it gets no EndpointSlices.
		res.Spec.IPs, res.MissingVIPFamilies = nil, nil
	} else {
		// A family this cluster does not serve gets no ClusterSetIP here
		// (nor EndpointSlices, below): DNS never hands out an address of
		// it, and the service is not held Pending for it.
		res.Spec.IPFamilies = servedFamilies(res.Spec.IPFamilies, c.cfg.IPFamilies)
		res.Spec.IPs = servedIPs(res.Spec.IPs, c.cfg.IPFamilies)
		res.MissingVIPFamilies = servedFamilies(res.MissingVIPFamilies, c.cfg.IPFamilies)
	}
	si, err = c.writeServiceImport(ctx, si, namespace, name, res)
	if err != nil {
		return err
	}
	byCluster := make(map[string]record.Export, len(exports))
	for _, e := range exports {
		byCluster[e.Cluster] = e
	}
	sources, dropped, err := c.sourcesOf(key, live, byCluster)
	if err != nil {
		return err
	}
	rejected = append(rejected, dropped...)
	if !served {
		sources = nil
	}
	for i := range sources {
		sources[i].slices = servedSlices(sources[i].slices, c.cfg.IPFamilies)
	}
	fresh := c.noteRejections(ctx, key, rejected)
	// The slices and the status are independent writes: made at once.
	var statusErr error
	statusDone := make(chan struct{})
	go func() {
		defer close(statusDone)
		statusErr = c.writeStatus(ctx, si, res, live, rejected)
	}()
	sliceErr := c.writeSlices(ctx, si, sources)
	<-statusDone
	for _, r := range fresh {
		c.cfg.Recorder.Eventf(si, corev1.EventTypeWarning, r.reason, "Rejected from the broker records: %s", r.message())
	}
	logger.V(4).Info("Synced import", "type", res.Spec.Type, "ips", res.Spec.IPs, "clusters", res.Clusters, "live", live)
	return errors.Join(sliceErr, statusErr)
}

// exportsOf returns the records of a service that count. An invalid
// record is left out (one broken writer must not stop everyone's import)
// and said so at -v=2; so is a record beyond its cluster's cap. Records of
// clusters gone for longer than the grace are left out too, unless no
// other record is left: the remaining clusters' view takes over, and a
// service only gone clusters export keeps its ServiceImport (they may come
// back).
func (c *Controller) exportsOf(ctx context.Context, namespace, name string) ([]record.Export, error) {
	objs, err := c.records.ByIndex(byService, namespace+"/"+name)
	if err != nil {
		return nil, err
	}
	logger := klog.FromContext(ctx)
	exports := make([]record.Export, 0, len(objs))
	pinned := 0
	for _, o := range objs {
		obj, ok := o.(*record.Cached)
		if !ok {
			continue
		}
		if obj.Invalid != nil {
			logger.V(2).Info("Ignoring an invalid broker record", "record", klog.KObj(obj), "err", obj.Invalid)
			continue
		}
		if !c.admitted(obj) {
			logger.V(2).Info("Ignoring a broker record beyond its cluster's cap", "record", klog.KObj(obj), "cluster", obj.Export.Cluster, "cap", c.caps.max)
			continue
		}
		exports = append(exports, obj.Export)
		if c.live.Pinned(obj.Export.Cluster) {
			pinned++
		}
	}
	if pinned > 0 && pinned < len(exports) {
		exports = slices.DeleteFunc(exports, func(e record.Export) bool {
			if c.live.Pinned(e.Cluster) {
				return false
			}
			logger.V(4).Info("Leaving out the record of a cluster gone past the grace", "cluster", e.Cluster)
			return true
		})
	}
	return exports, nil
}

// serviceDenied reports whether the service namespace/name is never imported:
// it, or its namespace, is on the denylist.
func (c *Controller) serviceDenied(namespace, name string) bool {
	return c.denied[namespace] || c.deniedServices[namespace+"/"+name]
}

// noteRejections records what the sync of key refused and returns what it
// did not refuse last time: each is counted and logged here once, and told
// on the ServiceImport by the caller.
func (c *Controller) noteRejections(ctx context.Context, key string, rejected []rejection) []rejection {
	now := make(map[string]rejection, len(rejected))
	for _, r := range rejected {
		now[r.id()] = r
	}
	c.rejectedMu.Lock()
	before := c.rejected[key]
	if len(now) == 0 {
		delete(c.rejected, key)
	} else {
		c.rejected[key] = now
	}
	c.rejectedMu.Unlock()
	var fresh []rejection
	for _, r := range rejected {
		prev, seen := before[r.id()]
		if seen && prev.count >= r.count {
			continue
		}
		c.cfg.Metrics.rejected(r.reason, r.count-prev.count)
		klog.FromContext(ctx).Info("Rejected part of a broker record", "reason", r.reason, "cluster", r.cluster, "detail", r.message())
		if !seen {
			fresh = append(fresh, r)
		}
	}
	return fresh
}

// liveClusters are the contributing clusters whose endpoints are served.
func (c *Controller) liveClusters(contributing []string) []string {
	var live []string
	for _, cluster := range contributing {
		if c.live.Live(cluster) {
			live = append(live, cluster)
		}
	}
	return live
}

func (c *Controller) namespaceUsable(name string) bool {
	ns, err := c.namespaces.Get(name)
	return err == nil && namespaceUsable(ns)
}

func namespaceUsable(ns *corev1.Namespace) bool {
	return ns.DeletionTimestamp == nil && ns.Status.Phase != corev1.NamespaceTerminating
}

// writeServiceImport creates the ServiceImport, or updates its spec and
// the metadata the importer owns when they differ from the merge's. It
// returns the object as the API server has it now.
func (c *Controller) writeServiceImport(ctx context.Context, si *mcsv1beta1.ServiceImport, namespace, name string, res merge.Result) (*mcsv1beta1.ServiceImport, error) {
	api := c.cfg.LocalMCS.MulticlusterV1beta1().ServiceImports(namespace)
	spec := desiredSpec(res)
	if si == nil {
		obj := &mcsv1beta1.ServiceImport{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
			Spec:       spec,
		}
		applyMetadata(&obj.ObjectMeta, res.Labels, res.Annotations)
		created, err := api.Create(ctx, obj, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			// Created by someone else, or by this importer before a restart,
			// and not cached yet: take it as it is and update it below.
			if si, err = api.Get(ctx, name, metav1.GetOptions{}); err != nil {
				return nil, fmt.Errorf("reading ServiceImport %s/%s, which exists but is not cached yet: %w", namespace, name, err)
			}
		} else if err != nil {
			return nil, fmt.Errorf("creating ServiceImport %s/%s: %w", namespace, name, err)
		} else {
			c.Metrics.Wrote("serviceimport", "create")
			c.importCache.Mutation(created)
			// Routine at scale: logged, not an Event.
			klog.FromContext(ctx).V(2).Info("Imported service", "serviceImport", klog.KObj(created), "type", spec.Type, "ips", spec.IPs, "clusters", res.Clusters)
			return created, nil
		}
	}

	upd := si.DeepCopy()
	metaChanged := applyMetadata(&upd.ObjectMeta, res.Labels, res.Annotations)
	changed := specChanges(si.Spec, spec)
	if !metaChanged && len(changed) == 0 {
		return si, nil
	}
	upd.Spec = spec
	updated, err := api.Update(ctx, upd, metav1.UpdateOptions{})
	if err != nil {
		return nil, fmt.Errorf("updating ServiceImport %s/%s: %w", namespace, name, err)
	}
	c.Metrics.Wrote("serviceimport", "update")
	c.importCache.Mutation(updated)
	if len(changed) > 0 {
		klog.FromContext(ctx).Info("Updated imported service", "serviceImport", klog.KObj(updated), "changed", changed, "ips", spec.IPs)
		c.cfg.Recorder.Eventf(updated, corev1.EventTypeNormal, "Updated", "Spec updated from the exports (%s)", strings.Join(changed, ", "))
	} else {
		klog.FromContext(ctx).V(2).Info("Updated the exported labels and annotations of an imported service", "serviceImport", klog.KObj(updated))
	}
	return updated, nil
}

// desiredSpec is the merge's spec as the ServiceImport holds it.
func desiredSpec(res merge.Result) mcsv1beta1.ServiceImportSpec {
	spec := *res.Spec.DeepCopy()
	if spec.Ports == nil {
		// Required by the CRD: never null.
		spec.Ports = []mcsv1beta1.ServicePort{}
	}
	return spec
}

// specChanges names the fields in which have differs from want.
func specChanges(have, want mcsv1beta1.ServiceImportSpec) []string {
	var out []string
	check := func(field string, a, b any) {
		if !apiequality.Semantic.DeepEqual(a, b) {
			out = append(out, field)
		}
	}
	check("type", have.Type, want.Type)
	check("ports", have.Ports, want.Ports)
	check("ips", have.IPs, want.IPs)
	check("ipFamilies", have.IPFamilies, want.IPFamilies)
	check("sessionAffinity", have.SessionAffinity, want.SessionAffinity)
	check("sessionAffinityConfig", have.SessionAffinityConfig, want.SessionAffinityConfig)
	check("internalTrafficPolicy", have.InternalTrafficPolicy, want.InternalTrafficPolicy)
	check("trafficDistribution", have.TrafficDistribution, want.TrafficDistribution)
	if len(out) == 0 && !apiequality.Semantic.DeepEqual(have, want) {
		out = append(out, "spec")
	}
	return out
}

// cachedImport is the ServiceImport of key as the cache has it, or as this
// importer last wrote it when that is newer; nil when there is none.
func (c *Controller) cachedImport(key string) (*mcsv1beta1.ServiceImport, error) {
	obj, ok, err := c.importCache.GetByKey(key)
	if err != nil || !ok {
		return nil, err
	}
	si, _ := obj.(*mcsv1beta1.ServiceImport)
	return si, nil
}

// remove deletes the importer's slices and ServiceImport of a service no
// cluster exports any more. While the broker is unreachable nothing is
// deleted: an empty cache then means nothing.
func (c *Controller) remove(ctx context.Context, namespace, name string, si *mcsv1beta1.ServiceImport) error {
	if since, down := c.live.BrokerDown(); down {
		klog.FromContext(ctx).V(2).Info("Not removing the import while the broker is unreachable", "lastContact", since)
		return nil
	}
	own, err := c.ownSlicesOf(namespace + "/" + name)
	if err != nil {
		return err
	}
	errs := []error{c.slices.Delete(ctx, own)}
	if si != nil && managed(si) {
		err := c.cfg.LocalMCS.MulticlusterV1beta1().ServiceImports(namespace).Delete(ctx, name, metav1.DeleteOptions{
			Preconditions: &metav1.Preconditions{UID: &si.UID},
		})
		switch {
		case err == nil:
			c.Metrics.Wrote("serviceimport", "delete")
			klog.FromContext(ctx).Info("Removed imported service: no cluster exports it", "serviceImport", klog.KObj(si))
		case !apierrors.IsNotFound(err):
			errs = append(errs, fmt.Errorf("deleting ServiceImport %s/%s: %w", namespace, name, err))
		}
	}
	if si != nil {
		c.Metrics.Forget(namespace, name)
	}
	c.rejectedMu.Lock()
	delete(c.rejected, namespace+"/"+name)
	c.rejectedMu.Unlock()
	return errors.Join(errs...)
}
