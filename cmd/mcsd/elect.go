package main

import (
	"context"
	"fmt"
	"os"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"

	"github.com/mcsd-io/mcsd/internal/controller"
)

// leaseName is the leader-election Lease in the local cluster.
const leaseName = "mcsd-controllers"

// runElected runs the controllers while this replica holds the local
// leader-election Lease (or always, with --leader-elect=false). Losing the
// Lease while running is an error: the daemon exits and restarts as a
// follower rather than risk two replicas writing the same broker records.
func runElected(ctx context.Context, o *options, local *clients, ctrl *controllers) error {
	if !o.leaderElect {
		return ctrl.run(ctx)
	}
	identity := o.leaderElectID
	if identity == "" {
		host := o.nodeName
		if host == "" {
			host, _ = os.Hostname()
		}
		// Unique per process: in a container every incarnation is pid 1,
		// and a restarted replica must not take its predecessor's Lease
		// for its own.
		identity = fmt.Sprintf("%s_%s", host, uuid.NewUUID())
	}
	ctrl.election.identity.Store(&identity)
	if _, err := local.kube.CoreV1().Namespaces().Get(ctx, o.leaderElectNS, metav1.GetOptions{}); apierrors.IsNotFound(err) {
		return fmt.Errorf("--leader-elect-namespace: namespace %q does not exist in the local cluster; create it or choose another", o.leaderElectNS)
	}
	// As kube-controller-manager's: "<identity> became leader" and
	// "<identity> stopped leading" on the Lease, which kubectl describe
	// shows with the holder.
	recorder, stopEvents := controller.NewRecorder(local.kube, "mcsd")
	defer stopEvents()
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: o.leaderElectNS, Name: leaseName},
		Client:     local.kube.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: identity, EventRecorder: recorder},
	}
	var runErr error
	lostc := make(chan struct{})
	elector, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            lock,
		LeaseDuration:   o.leaderElectLease,
		RenewDeadline:   o.leaderElectRenew,
		RetryPeriod:     o.leaderElectRetry,
		ReleaseOnCancel: true,
		Name:            leaseName,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) {
				klog.FromContext(ctx).Info("Leading: running the exporter and importer", "identity", identity, "lease", klog.KRef(o.leaderElectNS, leaseName))
				runErr = ctrl.run(ctx)
				if runErr != nil && ctx.Err() == nil {
					close(lostc)
				}
			},
			OnStoppedLeading: func() {
				klog.FromContext(ctx).Info("Stopped leading", "identity", identity)
			},
			OnNewLeader: func(leader string) {
				ctrl.election.leader.Store(&leader)
				if leader != identity {
					klog.FromContext(ctx).Info("Another replica leads the controllers", "leader", leader)
				}
			},
		},
	})
	if err != nil {
		return fmt.Errorf("leader election: %w", err)
	}
	electCtx, cancel := context.WithCancel(ctx)
	var standby sync.WaitGroup
	standby.Go(func() { ctrl.runStandbyHeartbeat(electCtx) })
	defer func() {
		cancel()
		standby.Wait()
	}()
	go func() {
		select {
		case <-lostc:
			cancel()
		case <-electCtx.Done():
		}
	}()
	// Run returns when leadership is lost or ctx ends; with ReleaseOnCancel
	// the Lease is released on the way out, so another replica takes over
	// at once instead of after the lease duration.
	elector.Run(electCtx)
	if runErr != nil {
		return runErr
	}
	if ctx.Err() == nil {
		return fmt.Errorf("lost the leader-election Lease %s/%s", o.leaderElectNS, leaseName)
	}
	return nil
}
