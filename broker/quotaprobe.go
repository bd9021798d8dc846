package broker

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/mcsd-io/mcsd/internal/record"
)

// quotaProbeName is the ResourceQuota waitQuotaCounts creates in the probe
// namespace.
const quotaProbeName = "mcsd-quota-probe"

// quotaProbeBounds say how long waitQuotaCounts gives one probe quota
// before it creates another, and how long in all.
var quotaProbeBounds = struct{ each, total time.Duration }{each: 10 * time.Second, total: 3 * time.Minute}

// waitQuotaCounts waits until the broker's ResourceQuota controller counts
// every resource a member's quota limits. kube-controller-manager finds the
// resources of new CRDs (ServiceImports, right after the CRDs are
// installed) by discovery every 30 s, and it counts a quota it saw before
// then only at its next full resync, 5 minutes later: join, right after
// install, would wait that long for its member's quota. So a probe quota,
// with limits nothing reaches, is created in the probe namespace, and
// created again while the controller leaves it uncounted; once one is
// counted, every later quota is counted as soon as it is created.
func waitQuotaCounts(ctx context.Context, kube kubernetes.Interface, namespace string) error {
	ns := record.MemberNamespace(namespace, probeCluster)
	quotas := kube.CoreV1().ResourceQuotas(ns)
	hard := corev1.ResourceList{}
	for name := range memberQuota(DefaultMemberBudget) {
		hard[name] = *resource.NewQuantity(1<<40, resource.DecimalSI)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_ = quotas.Delete(ctx, quotaProbeName, metav1.DeleteOptions{})
	}()
	var last *corev1.ResourceQuota
	err := wait.PollUntilContextTimeout(ctx, quotaProbeBounds.each, quotaProbeBounds.total, true, func(ctx context.Context) (bool, error) {
		if err := quotas.Delete(ctx, quotaProbeName, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return false, err
		}
		q := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: quotaProbeName}, Spec: corev1.ResourceQuotaSpec{Hard: hard}}
		if _, err := quotas.Create(ctx, q, metav1.CreateOptions{}); err != nil {
			return false, err
		}
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, quotaProbeBounds.each, true, func(ctx context.Context) (bool, error) {
			got, err := quotas.Get(ctx, quotaProbeName, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			last = got
			return counted(got), nil
		})
		if err == nil {
			return true, nil
		}
		if ctx.Err() != nil {
			return false, ctx.Err()
		}
		return false, nil
	})
	if err != nil {
		status := "none"
		if last != nil {
			status = fmt.Sprintf("%v", last.Status.Used)
		}
		if errors.Is(err, context.DeadlineExceeded) || wait.Interrupted(err) {
			return fmt.Errorf("the broker's ResourceQuota controller counted no quota of a member's resources in %v (last usage %s): does the broker's kube-controller-manager run the resourcequota controller?", quotaProbeBounds.total, status)
		}
		return fmt.Errorf("probing the broker's quota controller in %s: %w", ns, err)
	}
	return nil
}

// counted reports whether the quota controller has counted every resource
// q limits: until then the API server refuses every write the quota covers
// ("status unknown for quota").
func counted(q *corev1.ResourceQuota) bool {
	for name, hard := range q.Spec.Hard {
		if got, ok := q.Status.Hard[name]; !ok || got.Cmp(hard) != 0 {
			return false
		}
		if _, ok := q.Status.Used[name]; !ok {
			return false
		}
	}
	return true
}
