package install

import (
	"context"
	"fmt"
	"time"

	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/mcs-api/config/crd"
	"sigs.k8s.io/yaml"

	"github.com/mcsd-io/mcsd/manifests"
)

// CRDDocs are the CRDs a broker and every member need (manifests/crds).
func CRDDocs() [][]byte {
	return [][]byte{crd.ServiceExportCRD, crd.ServiceImportCRD, manifests.ClusterPropertyCRD}
}

// CRDs decodes CRDDocs.
func CRDs() ([]*apiextv1.CustomResourceDefinition, error) {
	var out []*apiextv1.CustomResourceDefinition
	for _, doc := range CRDDocs() {
		def := &apiextv1.CustomResourceDefinition{}
		if err := yaml.Unmarshal(doc, def); err != nil {
			return nil, fmt.Errorf("decoding CRD: %w", err)
		}
		out = append(out, def)
	}
	return out, nil
}

// EnsureCRDs creates the CRDs that are absent and waits until each is
// Established. With replace, it also updates the spec of those present
// (the broker's installer, which owns them); without, it leaves them as
// they are (a member's join, which must not change what the broker or
// another tool installed). It returns the names of the CRDs it created.
func EnsureCRDs(ctx context.Context, cfg *rest.Config, replace bool) ([]string, error) {
	ext, err := apiextclient.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	defs, err := CRDs()
	if err != nil {
		return nil, err
	}
	crds := ext.ApiextensionsV1().CustomResourceDefinitions()
	var created []string
	for _, def := range defs {
		_, err := crds.Create(ctx, def, metav1.CreateOptions{FieldManager: FieldManager})
		switch {
		case err == nil:
			created = append(created, def.Name)
		case apierrors.IsAlreadyExists(err) && replace:
			var cur *apiextv1.CustomResourceDefinition
			if cur, err = crds.Get(ctx, def.Name, metav1.GetOptions{}); err == nil {
				cur.Spec = def.Spec
				_, err = crds.Update(ctx, cur, metav1.UpdateOptions{})
			}
		case apierrors.IsAlreadyExists(err):
			err = nil
		}
		if err != nil {
			return created, fmt.Errorf("installing CRD %s: %w", def.Name, err)
		}
		err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			cur, err := crds.Get(ctx, def.Name, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			for _, c := range cur.Status.Conditions {
				if c.Type == apiextv1.Established && c.Status == apiextv1.ConditionTrue {
					return true, nil
				}
			}
			return false, nil
		})
		if err != nil {
			return created, fmt.Errorf("CRD %s never became Established: %w", def.Name, err)
		}
	}
	return created, nil
}
