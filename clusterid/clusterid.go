// Package clusterid resolves this cluster's ID and records its ClusterSet
// membership as KEP-2149 ClusterProperties. The ID becomes one DNS label in
// <hostname>.<clusterid>.<svc>.<ns>.svc.<zone>, so it must be an RFC-1123
// label. The package never silently changes a property that already exists.
package clusterid

import (
	"context"
	"fmt"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	aboutv1beta1 "github.com/mcsd-io/mcsd/apis/about/v1beta1"
)

// Validate reports why id cannot be a cluster ID, or nil when it can.
func Validate(id string) error {
	if errs := validation.IsDNS1123Label(id); len(errs) > 0 {
		return fmt.Errorf("cluster ID %q is not a valid RFC-1123 DNS label: %s", id, strings.Join(errs, "; "))
	}
	return nil
}

// Resolver finds and records the cluster's identity in one cluster.
type Resolver struct {
	kube  kubernetes.Interface
	props propertyStore
}

// NewResolver returns a Resolver for the cluster the clients talk to.
func NewResolver(kube kubernetes.Interface, dyn dynamic.Interface) *Resolver {
	return &Resolver{kube: kube, props: newPropertyStore(dyn)}
}

// Resolve returns the cluster ID. In order: the flag value (when not empty),
// else the existing cluster.clusterset.k8s.io property, else the kube-system
// namespace UID. Whatever it returns is recorded as the property if none
// exists yet. A flag that disagrees with an existing property is an error
// naming both values: the ID must not change while the cluster is a member.
func (r *Resolver) Resolve(ctx context.Context, flagValue string) (string, error) {
	if flagValue != "" {
		if err := Validate(flagValue); err != nil {
			return "", fmt.Errorf("--cluster-id: %w", err)
		}
	}
	existing, err := r.props.get(ctx, aboutv1beta1.ClusterIDName)
	if err != nil {
		return "", err
	}
	if existing != nil {
		return checkExisting(existing.Spec.Value, flagValue)
	}

	id := flagValue
	if id == "" {
		ns, err := r.kube.CoreV1().Namespaces().Get(ctx, metav1.NamespaceSystem, metav1.GetOptions{})
		if err != nil {
			return "", fmt.Errorf("reading the kube-system namespace to derive a cluster ID (or pass --cluster-id): %w", err)
		}
		id = string(ns.UID)
		if err := Validate(id); err != nil {
			return "", fmt.Errorf("kube-system UID cannot serve as cluster ID, pass --cluster-id: %w", err)
		}
	}
	err = r.props.create(ctx, aboutv1beta1.ClusterIDName, id)
	if apierrors.IsAlreadyExists(err) {
		// Someone recorded an ID between our read and write: theirs stands.
		existing, err := r.props.get(ctx, aboutv1beta1.ClusterIDName)
		if err != nil {
			return "", err
		}
		if existing == nil {
			return "", fmt.Errorf("ClusterProperty %s vanished while it was being created; retry", aboutv1beta1.ClusterIDName)
		}
		return checkExisting(existing.Spec.Value, flagValue)
	}
	if err != nil {
		return "", fmt.Errorf("recording cluster ID %q as ClusterProperty %s: %w", id, aboutv1beta1.ClusterIDName, err)
	}
	klog.FromContext(ctx).Info("Recorded cluster ID", "clusterID", id, "property", aboutv1beta1.ClusterIDName)
	return id, nil
}

// Await returns the cluster ID another process records (mcsd's controller,
// through Resolve), waiting for it until ctx ends: for a reader that may
// not write the property. A flag value must agree with it, as for Resolve.
func (r *Resolver) Await(ctx context.Context, flagValue string) (string, error) {
	if flagValue != "" {
		if err := Validate(flagValue); err != nil {
			return "", fmt.Errorf("--cluster-id: %w", err)
		}
	}
	var existing *aboutv1beta1.ClusterProperty
	var last error
	err := wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
		existing, last = r.props.get(ctx, aboutv1beta1.ClusterIDName)
		return existing != nil, nil
	})
	if err != nil {
		if last == nil {
			last = fmt.Errorf("it does not exist")
		}
		return "", fmt.Errorf("waiting for ClusterProperty %s, which mcsd's controller records: %w (is the controller running?)", aboutv1beta1.ClusterIDName, last)
	}
	return checkExisting(existing.Spec.Value, flagValue)
}

func checkExisting(recorded, flagValue string) (string, error) {
	if err := Validate(recorded); err != nil {
		return "", fmt.Errorf("ClusterProperty %s: %w; fix or delete the property", aboutv1beta1.ClusterIDName, err)
	}
	if flagValue != "" && flagValue != recorded {
		return "", fmt.Errorf("--cluster-id=%q disagrees with ClusterProperty %s value %q; the ID must not change while the cluster is a member: drop the flag, or leave the ClusterSet and delete the property first", flagValue, aboutv1beta1.ClusterIDName, recorded)
	}
	return recorded, nil
}

// Join records membership in the named ClusterSet. Joining the set the
// cluster is already in is a no-op; joining another is an error, since the
// membership must be left first.
func (r *Resolver) Join(ctx context.Context, clusterSet string) error {
	if errs := validation.IsDNS1123Subdomain(clusterSet); len(errs) > 0 {
		return fmt.Errorf("ClusterSet name %q is not a valid DNS subdomain: %s", clusterSet, strings.Join(errs, "; "))
	}
	for {
		existing, err := r.props.get(ctx, aboutv1beta1.ClusterSetName)
		if err != nil {
			return err
		}
		if existing != nil {
			if existing.Spec.Value != clusterSet {
				return fmt.Errorf("cluster is a member of ClusterSet %q (ClusterProperty %s), cannot join %q before leaving it", existing.Spec.Value, aboutv1beta1.ClusterSetName, clusterSet)
			}
			return nil
		}
		err = r.props.create(ctx, aboutv1beta1.ClusterSetName, clusterSet)
		if apierrors.IsAlreadyExists(err) {
			continue
		}
		if err != nil {
			return fmt.Errorf("recording membership of ClusterSet %q: %w", clusterSet, err)
		}
		klog.FromContext(ctx).Info("Joined ClusterSet", "clusterSet", clusterSet)
		return nil
	}
}

// Leave removes the membership property; leaving when not a member is a no-op.
func (r *Resolver) Leave(ctx context.Context) error {
	return r.props.delete(ctx, aboutv1beta1.ClusterSetName)
}
