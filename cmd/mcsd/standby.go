package main

import (
	"context"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/mcsd-io/mcsd/exporter"
	"github.com/mcsd-io/mcsd/internal/record"
	"github.com/mcsd-io/mcsd/internal/version"
)

// standbyClientQPS is the standby heartbeat's own limit: one read per tick,
// and a write only while the leader is missing.
const standbyClientQPS = 5

// runStandbyHeartbeat keeps this cluster alive for the other members while
// no replica leads. A leader that dies without releasing its election
// Lease leaves the cluster leaderless for up to the election's lease
// duration (15 s by default), longer than the cluster TTL (10 s): without
// a stand-in, every other member would drop this cluster's endpoints
// during a mere change of leader. The standby renews the broker Lease only
// when the leader has not for half the shorter of the lease duration and
// the TTL, and only while it reaches its own API server: a replica cut off
// from its cluster says nothing about it.
func (c *controllers) runStandbyHeartbeat(ctx context.Context) {
	o := c.o
	logger := klog.FromContext(ctx).WithValues("clusterID", c.clusterID)
	interval := o.leaseDuration / 5
	var broker kubernetes.Interface
	err := wait.PollUntilContextCancel(ctx, interval, true, func(ctx context.Context) (bool, error) {
		cfg, err := brokerConfig(ctx, o, c.local.kube)
		if err == nil {
			var cl *clients
			if cl, err = newClients(cfg, standbyClientQPS, 2*standbyClientQPS); err == nil {
				broker = cl.kube
				return true, nil
			}
		}
		logger.V(2).Info("The standby heartbeat has no broker client yet", "err", err)
		return false, nil
	})
	if err != nil {
		return
	}
	hb := &exporter.Heartbeat{
		Broker:     broker,
		Namespace:  record.MemberNamespace(o.brokerNamespace, c.clusterID),
		Name:       record.LeaseName(c.clusterID),
		ClusterID:  c.clusterID,
		Duration:   o.leaseDuration,
		Interval:   interval,
		Version:    version.Get().Version,
		StaleAfter: min(o.leaseDuration, o.clusterTTL) / 2,
		Skip: func(ctx context.Context) bool {
			if c.leading.Load() {
				return true
			}
			_, err := c.local.kube.CoordinationV1().Leases(o.leaderElectNS).Get(ctx, leaseName, metav1.GetOptions{})
			return err != nil && !apierrors.IsNotFound(err)
		},
		OnStoodIn: func(age time.Duration) {
			logger.Info("Renewed this cluster's broker Lease for a leader that stopped renewing it", "lease", klog.KRef(record.MemberNamespace(o.brokerNamespace, c.clusterID), record.LeaseName(c.clusterID)), "age", age)
			if c.exporterMetrics != nil {
				c.exporterMetrics.ObserveStandInRenewal()
			}
		},
	}
	hb.Run(klog.NewContext(ctx, logger))
}
