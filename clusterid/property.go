package clusterid

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"

	aboutv1beta1 "github.com/mcsd-io/mcsd/apis/about/v1beta1"
)

// propertyStore reads and writes ClusterProperties through the dynamic
// client, so no generated clientset is needed for a single small kind.
type propertyStore struct {
	client dynamic.NamespaceableResourceInterface
}

func newPropertyStore(client dynamic.Interface) propertyStore {
	return propertyStore{client: client.Resource(aboutv1beta1.SchemeGroupVersion.WithResource(aboutv1beta1.Resource))}
}

// get returns the property, or nil when it does not exist.
func (s propertyStore) get(ctx context.Context, name string) (*aboutv1beta1.ClusterProperty, error) {
	u, err := s.client.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading ClusterProperty %q: %w", name, err)
	}
	var p aboutv1beta1.ClusterProperty
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &p); err != nil {
		return nil, fmt.Errorf("decoding ClusterProperty %q: %w", name, err)
	}
	return &p, nil
}

// create stores a new property; it returns the API error unchanged so callers
// can tell AlreadyExists apart.
func (s propertyStore) create(ctx context.Context, name, value string) error {
	p := &aboutv1beta1.ClusterProperty{
		TypeMeta:   metav1.TypeMeta{APIVersion: aboutv1beta1.SchemeGroupVersion.String(), Kind: "ClusterProperty"},
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       aboutv1beta1.ClusterPropertySpec{Value: value},
	}
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(p)
	if err != nil {
		return err
	}
	_, err = s.client.Create(ctx, &unstructured.Unstructured{Object: obj}, metav1.CreateOptions{})
	return err
}

func (s propertyStore) delete(ctx context.Context, name string) error {
	err := s.client.Delete(ctx, name, metav1.DeleteOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("deleting ClusterProperty %q: %w", name, err)
	}
	return nil
}
