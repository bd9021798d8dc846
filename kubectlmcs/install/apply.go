package install

import (
	"context"
	"fmt"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
)

// FieldManager owns every field join applies: joining again finds its own
// fields as they should be and changes nothing, and leave recognises the
// objects join made.
const FieldManager = "kubectl-mcs"

// Client applies and removes objects of any kind in one cluster.
type Client struct {
	dyn    dynamic.Interface
	mapper meta.RESTMapper
}

// NewClient is a Client of the cluster of cfg.
func NewClient(cfg *rest.Config) (*Client, error) {
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	disco, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return &Client{dyn: dyn, mapper: restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disco))}, nil
}

func (c *Client) resource(obj *unstructured.Unstructured) (dynamic.ResourceInterface, error) {
	gvk := obj.GroupVersionKind()
	m, err := c.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return nil, fmt.Errorf("%s %s: the cluster does not serve its kind: %w", gvk.Kind, obj.GetName(), err)
	}
	if m.Scope.Name() == meta.RESTScopeNameNamespace {
		return c.dyn.Resource(m.Resource).Namespace(obj.GetNamespace()), nil
	}
	return c.dyn.Resource(m.Resource), nil
}

// Get reads the object of obj's kind, namespace and name.
func (c *Client) Get(ctx context.Context, obj *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	res, err := c.resource(obj)
	if err != nil {
		return nil, err
	}
	return res.Get(ctx, obj.GetName(), metav1.GetOptions{})
}

// Apply applies objs server-side, in order, under FieldManager, taking
// over fields another manager set (kubectl apply -k of the same
// manifests, say). It returns the objects it created or changed, as
// "Kind namespace/name".
func (c *Client) Apply(ctx context.Context, objs []*unstructured.Unstructured) ([]string, error) {
	var changed []string
	for _, obj := range objs {
		res, err := c.resource(obj)
		if err != nil {
			return changed, err
		}
		before := ""
		if cur, err := res.Get(ctx, obj.GetName(), metav1.GetOptions{}); err == nil {
			before = cur.GetResourceVersion()
		}
		after, err := res.Apply(ctx, obj.GetName(), obj, metav1.ApplyOptions{FieldManager: FieldManager, Force: true})
		if err != nil {
			return changed, fmt.Errorf("applying %s %s: %w", obj.GetKind(), name(obj), err)
		}
		if after.GetResourceVersion() != before {
			changed = append(changed, obj.GetKind()+" "+name(obj))
		}
	}
	return changed, nil
}

// Remove deletes those of objs that FieldManager applied, last first,
// and waits until they are gone. An object join did not apply is another
// tool's, and stays. It returns the objects it deleted.
func (c *Client) Remove(ctx context.Context, objs []*unstructured.Unstructured) ([]string, error) {
	var removed []string
	for _, obj := range slices.Backward(objs) {
		res, err := c.resource(obj)
		if err != nil {
			return removed, err
		}
		cur, err := res.Get(ctx, obj.GetName(), metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return removed, fmt.Errorf("reading %s %s: %w", obj.GetKind(), name(obj), err)
		}
		if !Applied(cur) {
			continue
		}
		uid := cur.GetUID()
		policy := metav1.DeletePropagationForeground
		err = res.Delete(ctx, obj.GetName(), metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}, PropagationPolicy: &policy})
		if err != nil && !apierrors.IsNotFound(err) {
			return removed, fmt.Errorf("deleting %s %s: %w", obj.GetKind(), name(obj), err)
		}
		err = wait.PollUntilContextCancel(ctx, 250*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			cur, err := res.Get(ctx, obj.GetName(), metav1.GetOptions{})
			return apierrors.IsNotFound(err) || (err == nil && cur.GetUID() != uid), nil
		})
		if err != nil {
			return removed, fmt.Errorf("%s %s is still there (a finalizer?): %w", obj.GetKind(), name(obj), err)
		}
		removed = append(removed, obj.GetKind()+" "+name(obj))
	}
	return removed, nil
}

// Applied says whether FieldManager applied obj.
func Applied(obj metav1.Object) bool {
	for _, f := range obj.GetManagedFields() {
		if f.Manager == FieldManager && f.Operation == metav1.ManagedFieldsOperationApply {
			return true
		}
	}
	return false
}

func name(obj *unstructured.Unstructured) string {
	if obj.GetNamespace() == "" {
		return obj.GetName()
	}
	return obj.GetNamespace() + "/" + obj.GetName()
}
