package broker

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	mcsclient "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned"

	"github.com/mcsd-io/mcsd/clusterid"
	"github.com/mcsd-io/mcsd/internal/record"
)

// RemoveMember removes member id from the broker of namespace: it deletes
// the member's declaration and waits for the garbage collector to delete
// the identity it owns (so that the member cannot write again), deletes
// the member's namespace (its records, EndpointSlices and Lease with it)
// and its ClusterSetIP claims, and anything of it left in the broker
// namespace by the shared layout; then it waits, up to timeout, until
// nothing of the member is left. It says what it does to progress and
// returns an error naming whatever is still there.
func RemoveMember(ctx context.Context, kube kubernetes.Interface, mcs mcsclient.Interface, namespace, id string, timeout time.Duration, progress func(string, ...any)) error {
	if progress == nil {
		progress = func(string, ...any) {}
	}
	if err := clusterid.Validate(id); err != nil {
		return err
	}
	foreground := metav1.DeletePropagationForeground
	err := kube.CoreV1().ConfigMaps(namespace).Delete(ctx, DeclarationName(id), metav1.DeleteOptions{PropagationPolicy: &foreground})
	switch {
	case apierrors.IsNotFound(err):
		progress("member %s has no declaration %s/%s", id, namespace, DeclarationName(id))
	case err != nil:
		return fmt.Errorf("deleting the declaration of %s: %w", id, err)
	default:
		progress("deleted the declaration %s/%s", namespace, DeclarationName(id))
	}
	account := ServiceAccountName(id)
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		_, err := kube.CoreV1().ServiceAccounts(namespace).Get(ctx, account, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		return fmt.Errorf("the identity %s/%s was not deleted with its declaration (is the broker's garbage collector running?): %w", namespace, account, err)
	}
	progress("identity %s/%s is gone", namespace, account)

	own := record.MemberNamespace(namespace, id)
	err = kube.CoreV1().Namespaces().Delete(ctx, own, metav1.DeleteOptions{})
	switch {
	case apierrors.IsNotFound(err), apierrors.IsConflict(err):
		// Gone, or being deleted already.
	case err != nil:
		return fmt.Errorf("deleting the namespace %s of %s: %w", own, id, err)
	default:
		progress("deleting the namespace %s (its records, EndpointSlices and Lease)", own)
	}
	sel := metav1.ListOptions{LabelSelector: record.ClusterSelector(id).String()}
	del := metav1.DeleteOptions{}
	for what, f := range map[string]func() error{
		"ClusterSetIP claims": func() error { return kube.CoreV1().ConfigMaps(namespace).DeleteCollection(ctx, del, sel) },
		// The shared layout's objects, on a broker not migrated yet.
		"export records": func() error {
			return mcs.MulticlusterV1beta1().ServiceImports(namespace).DeleteCollection(ctx, del, sel)
		},
		"EndpointSlices": func() error { return kube.DiscoveryV1().EndpointSlices(namespace).DeleteCollection(ctx, del, sel) },
		"Lease":          func() error { return kube.CoordinationV1().Leases(namespace).DeleteCollection(ctx, del, sel) },
	} {
		if err := f(); err != nil {
			return fmt.Errorf("deleting the %s of %s in %s: %w", what, id, namespace, err)
		}
	}
	var left []string
	var lookErr error
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		// What the last complete look found is what is said: a look cut
		// short by the timeout finds nothing.
		found, err := MemberLeftovers(ctx, kube, mcs, namespace, id)
		if err != nil {
			lookErr = err
			return false, nil
		}
		left, lookErr = found, nil
		return len(left) == 0, nil
	})
	if err != nil {
		if len(left) == 0 {
			return fmt.Errorf("checking that nothing of %s is left: %w", id, errors.Join(err, lookErr))
		}
		return fmt.Errorf("member %s is not gone from the broker, still there: %s", id, strings.Join(left, "; "))
	}
	progress("nothing of %s is left on the broker", id)
	return nil
}

// MemberLeftovers lists what of member id the broker of namespace still
// holds: its declaration, identity, bindings and claims in the broker
// namespace, its namespace, and any export record, EndpointSlice or Lease
// of it in either (with the finalizers that hold an object that is being
// deleted).
func MemberLeftovers(ctx context.Context, kube kubernetes.Interface, mcs mcsclient.Interface, namespace, id string) ([]string, error) {
	var left []string
	var errs []error
	note := func(kind string, m metav1.Object) {
		s := kind + " " + m.GetNamespace() + "/" + m.GetName()
		if m.GetNamespace() == "" {
			s = kind + " " + m.GetName()
		}
		if m.GetDeletionTimestamp() != nil {
			s += " (being deleted"
			if f := m.GetFinalizers(); len(f) > 0 {
				s += ", held by finalizers " + strings.Join(f, ",")
			}
			s += ")"
		}
		left = append(left, s)
	}
	check := func(err error) bool {
		if err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, err)
		}
		return err == nil
	}
	if cm, err := kube.CoreV1().ConfigMaps(namespace).Get(ctx, DeclarationName(id), metav1.GetOptions{}); check(err) {
		note("declaration", cm)
	}
	if sa, err := kube.CoreV1().ServiceAccounts(namespace).Get(ctx, ServiceAccountName(id), metav1.GetOptions{}); check(err) {
		note("ServiceAccount", sa)
	}
	if s, err := kube.CoreV1().Secrets(namespace).Get(ctx, ServiceAccountName(id)+"-token", metav1.GetOptions{}); check(err) {
		note("Secret", s)
	}
	if rb, err := kube.RbacV1().RoleBindings(namespace).Get(ctx, MemberRole+"-"+id, metav1.GetOptions{}); check(err) {
		note("RoleBinding", rb)
	}
	if ns, err := kube.CoreV1().Namespaces().Get(ctx, record.MemberNamespace(namespace, id), metav1.GetOptions{}); check(err) {
		note("namespace", ns)
	}
	sel := metav1.ListOptions{LabelSelector: record.ClusterSelector(id).String()}
	if cms, err := kube.CoreV1().ConfigMaps(namespace).List(ctx, sel); check(err) {
		for i := range cms.Items {
			note("ConfigMap", &cms.Items[i])
		}
	}
	mine := func(m metav1.Object) bool {
		return m.GetNamespace() == namespace || m.GetNamespace() == record.MemberNamespace(namespace, id)
	}
	if list, err := mcs.MulticlusterV1beta1().ServiceImports(metav1.NamespaceAll).List(ctx, sel); check(err) {
		for i := range list.Items {
			if mine(&list.Items[i]) {
				note("export record", &list.Items[i])
			}
		}
	}
	if list, err := kube.DiscoveryV1().EndpointSlices(metav1.NamespaceAll).List(ctx, sel); check(err) {
		for i := range list.Items {
			if mine(&list.Items[i]) {
				note("EndpointSlice", &list.Items[i])
			}
		}
	}
	if list, err := kube.CoordinationV1().Leases(metav1.NamespaceAll).List(ctx, sel); check(err) {
		for i := range list.Items {
			if mine(&list.Items[i]) {
				note("Lease", &list.Items[i])
			}
		}
	}
	return left, errors.Join(errs...)
}
