package exporter

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"

	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/mcsd-io/mcsd/internal/merge"
	"github.com/mcsd-io/mcsd/internal/quotaretry"
	"github.com/mcsd-io/mcsd/internal/record"
)

// sync makes the broker hold exactly this cluster's view of one service and
// the ServiceExport report it. It is idempotent: with nothing changed it
// writes nothing.
func (c *Controller) sync(ctx context.Context, namespace, name string) error {
	export, err := c.exports.ServiceExports(namespace).Get(name)
	if apierrors.IsNotFound(err) || (err == nil && export.DeletionTimestamp != nil) {
		c.Metrics.Forget(namespace, name)
		return c.withdraw(ctx, namespace, name)
	}
	if err != nil {
		return err
	}
	status := newStatus(export)

	svc, err := c.services.Services(namespace).Get(name)
	if apierrors.IsNotFound(err) {
		status.invalid(mcsv1beta1.ServiceExportReasonNoService, fmt.Sprintf("Service %s/%s does not exist", namespace, name))
		return errors.Join(c.withdraw(ctx, namespace, name), c.writeStatus(ctx, export, status))
	}
	if err != nil {
		return err
	}
	own, err := record.FromService(c.cfg.ClusterID, export, svc)
	if errors.Is(err, record.ErrExternalName) {
		status.invalid(mcsv1beta1.ServiceExportReasonInvalidServiceType, fmt.Sprintf("Service %s/%s is of type ExternalName, which cannot be exported", namespace, name))
		return errors.Join(c.withdraw(ctx, namespace, name), c.writeStatus(ctx, export, status))
	}
	if err != nil {
		return err
	}
	own.ClusterSetIPDisabled = !c.clusterSetIPWanted(export)
	status.valid()

	others, existing, err := c.recordsOf(ctx, namespace, name)
	if err != nil {
		return err
	}
	if existing != nil {
		if prev, err := record.Decode(existing); err == nil {
			own.VIPs = prev.VIPs
		}
	}
	// Merged as every reader merges it: from when the broker stored this
	// cluster's record, if that is later than the ServiceExport's time.
	asRead := own
	if existing != nil {
		asRead.Created = record.Witnessed(own.Created, record.StoredAt(existing))
	}
	vips, vipErr := c.vips.chooseVIPs(asRead, others)
	own.VIPs = vips
	if err := own.Validate(); err != nil {
		status.failed(err)
		return errors.Join(err, c.writeStatus(ctx, export, status))
	}

	// The record and the slices are independent writes (importers join
	// them by their labels): made at once, they cost one round trip to the
	// broker instead of two, which is most of a bulk export's time.
	sliceErr := make(chan error, 1)
	go func() { sliceErr <- c.writeSlices(ctx, namespace, name) }()
	recordErr := c.writeRecord(ctx, existing, own)
	if recordErr != nil {
		c.vips.release(vips)
	}
	if err := errors.Join(recordErr, <-sliceErr); err != nil {
		status.failed(err)
		return errors.Join(err, c.writeStatus(ctx, export, status))
	}
	status.exported()
	// Reported only once written: a failed write hands the VIP back.
	status.clusterSetIP(own, vipErr)

	asRead.VIPs = own.VIPs
	res, err := merge.Merge(append(others, asRead))
	if err != nil {
		return err
	}
	if v, ok := res.Verdict(c.cfg.ClusterID); ok {
		status.conflict(v)
	}
	klog.FromContext(ctx).V(4).Info("Synced export", "type", own.Type, "vips", own.VIPs, "clusters", res.Clusters)
	return c.writeStatus(ctx, export, status)
}

// clusterSetIPWanted applies the ServiceExport's annotation over the
// cluster default.
func (c *Controller) clusterSetIPWanted(export *mcsv1beta1.ServiceExport) bool {
	if v, ok := export.Annotations[AnnotationClusterSetIP]; ok {
		if b, err := strconv.ParseBool(v); err == nil {
			return b
		}
	}
	return c.cfg.ClusterSetIPs
}

// recordsOf returns the other clusters' valid records of a service and this
// cluster's record object, if any. Malformed records are left out: one
// broken writer must not stop everyone's export.
func (c *Controller) recordsOf(ctx context.Context, namespace, name string) ([]record.Export, *mcsv1beta1.ServiceImport, error) {
	objs, err := indexed[*mcsv1beta1.ServiceImport](c.recordIndex, namespace, name)
	if err != nil {
		return nil, nil, err
	}
	logger := klog.FromContext(ctx)
	rules := c.exportRules()
	var others []record.Export
	var own *mcsv1beta1.ServiceImport
	for _, o := range objs {
		if o.Labels[record.LabelSourceCluster] == c.cfg.ClusterID {
			own = o
			continue
		}
		e, err := record.Decode(o)
		if err != nil {
			logger.V(2).Info("Ignoring a malformed broker record", "record", klog.KObj(o), "err", err)
			continue
		}
		// As importers do: a record the export rules keep out (written
		// before the rule) counts for nothing.
		if ok, rule := rules.Allows(e.Namespace, e.Cluster); !ok {
			logger.V(2).Info("Ignoring a broker record the export rules keep out", "record", klog.KObj(o), "rule", rule.Name)
			continue
		}
		others = append(others, e)
	}
	return others, own, nil
}

func (c *Controller) writeRecord(ctx context.Context, existing *mcsv1beta1.ServiceImport, own record.Export) error {
	records := c.cfg.BrokerMCS.MulticlusterV1beta1().ServiceImports(c.memberNamespace)
	if existing == nil {
		obj := record.Encode(own)
		obj.Namespace = c.memberNamespace
		err := quotaretry.Write(ctx, func() error {
			_, err := records.Create(ctx, obj, metav1.CreateOptions{})
			return err
		})
		switch {
		case apierrors.IsAlreadyExists(err):
			// The cache is behind the broker: read the record and bring it
			// up to date now instead of failing the sync.
			if existing, err = records.Get(ctx, obj.Name, metav1.GetOptions{}); err != nil {
				return fmt.Errorf("reading broker record %s, which exists but is not cached yet: %w", obj.Name, err)
			}
		case err != nil:
			return fmt.Errorf("creating broker record for %s/%s: %w", own.Namespace, own.Name, err)
		default:
			c.Metrics.Wrote("record", "create")
			return nil
		}
	}
	if record.UpToDate(existing, own) {
		return nil
	}
	if _, err := records.Update(ctx, record.Apply(existing, own), metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("updating broker record %s: %w", existing.Name, err)
	}
	c.Metrics.Wrote("record", "update")
	return nil
}

// writeSlices makes this cluster's broker slices of a service match its
// local endpoints, updating slices in place and deleting only extras.
func (c *Controller) writeSlices(ctx context.Context, namespace, name string) error {
	local, err := indexed[*discoveryv1.EndpointSlice](c.sliceIndex, namespace, name)
	if err != nil {
		return err
	}
	want := brokerSlices(c.cfg.ClusterID, namespace, name, local)
	have, err := c.ownSlicesOf(namespace, name)
	if err != nil {
		return err
	}
	return c.applier.Apply(ctx, c.memberNamespace, want, have, false)
}

// withdraw removes this cluster's record and slices of a service.
func (c *Controller) withdraw(ctx context.Context, namespace, name string) error {
	var errs []error
	recs, err := indexed[*mcsv1beta1.ServiceImport](c.recordIndex, namespace, name)
	if err != nil {
		return err
	}
	for _, r := range recs {
		if r.Labels[record.LabelSourceCluster] != c.cfg.ClusterID {
			continue
		}
		err := c.cfg.BrokerMCS.MulticlusterV1beta1().ServiceImports(c.memberNamespace).Delete(ctx, r.Name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("withdrawing broker record %s: %w", r.Name, err))
			continue
		}
		c.Metrics.Wrote("record", "delete")
		klog.FromContext(ctx).Info("Withdrew export", "service", klog.KRef(namespace, name), "record", r.Name)
	}
	slices, err := c.ownSlicesOf(namespace, name)
	if err != nil {
		return err
	}
	errs = append(errs, c.applier.Delete(ctx, slices))
	return errors.Join(errs...)
}

// ownSlicesOf returns this cluster's broker EndpointSlices of a service.
// The informer holds only this cluster's; the label is checked anyway.
func (c *Controller) ownSlicesOf(namespace, name string) ([]*discoveryv1.EndpointSlice, error) {
	all, err := indexed[*discoveryv1.EndpointSlice](c.ownSliceIndex, namespace, name)
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(all, func(s *discoveryv1.EndpointSlice) bool {
		return s.Labels[record.LabelSourceCluster] != c.cfg.ClusterID
	}), nil
}

// indexed returns the objects of type T an indexer holds for a service.
func indexed[T any](idx cache.Indexer, namespace, name string) ([]T, error) {
	objs, err := idx.ByIndex(record.IndexByService, record.ServiceKey(namespace, name))
	if err != nil {
		return nil, err
	}
	out := make([]T, 0, len(objs))
	for _, o := range objs {
		if t, ok := o.(T); ok {
			out = append(out, t)
		}
	}
	return out, nil
}
