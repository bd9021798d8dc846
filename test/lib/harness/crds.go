package harness

import (
	"context"
	"fmt"
	"time"

	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/mcs-api/config/crd"
	"sigs.k8s.io/yaml"

	"github.com/mcsd-io/mcsd/manifests"
)

// installCRDs installs the mcs-api CRDs, exactly as the module ships them, and
// mcsd's ClusterProperty CRD, then waits until each resource can be listed: a
// new CRD's storage answers 429 for a moment even after it is Established.
func (c *Cluster) installCRDs(ctx context.Context) error {
	for _, doc := range [][]byte{crd.ServiceExportCRD, crd.ServiceImportCRD, manifests.ClusterPropertyCRD} {
		var def apiextv1.CustomResourceDefinition
		if err := yaml.Unmarshal(doc, &def); err != nil {
			return fmt.Errorf("decoding CRD: %w", err)
		}
		_, err := c.APIExtensions.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, &def, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("%s: creating CRD %s: %w", c.Name, def.Name, err)
		}
		for _, v := range def.Spec.Versions {
			if !v.Served {
				continue
			}
			gvr := schema.GroupVersionResource{Group: def.Spec.Group, Version: v.Name, Resource: def.Spec.Names.Plural}
			err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
				_, err := c.Dynamic.Resource(gvr).List(ctx, metav1.ListOptions{Limit: 1})
				return err == nil, nil
			})
			if err != nil {
				return fmt.Errorf("%s: CRD %s version %s never became listable: %w", c.Name, def.Name, v.Name, err)
			}
		}
	}
	return nil
}
