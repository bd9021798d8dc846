package manifests_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/yaml"

	"github.com/mcsd-io/mcsd/test/harness"
)

// Every manifest mcsd ships is accepted by a real API server
// (server-side apply, dry run), so a typo or a schema violation fails here
// rather than on an operator's cluster.
func TestEveryManifestIsAcceptedByARealAPIServer(t *testing.T) {
	cs := harness.Start(t, harness.Options{Clusters: 1})
	c := cs.Members[0]
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, ns := range []string{"mcsd-system", "mcsd-broker"} {
		if _, err := c.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(c.Kube.Discovery()))

	files, err := filepath.Glob("*/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	applied := 0
	for _, file := range files {
		if filepath.Base(file) == "kustomization.yaml" {
			continue
		}
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
		for {
			doc, err := reader.Read()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("%s: %v", file, err)
			}
			var obj unstructured.Unstructured
			if err := yaml.Unmarshal(doc, &obj.Object); err != nil {
				t.Fatalf("%s: %v", file, err)
			}
			if len(obj.Object) == 0 {
				continue
			}
			gvk := obj.GroupVersionKind()
			mapping, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
			if err != nil {
				t.Errorf("%s: %s %s: %v", file, gvk, obj.GetName(), err)
				continue
			}
			client := c.Dynamic.Resource(mapping.Resource)
			var res interface {
				Apply(context.Context, string, *unstructured.Unstructured, metav1.ApplyOptions, ...string) (*unstructured.Unstructured, error)
			} = client
			if ns := obj.GetNamespace(); ns != "" {
				res = client.Namespace(ns)
			}
			_, err = res.Apply(ctx, obj.GetName(), &obj, metav1.ApplyOptions{FieldManager: "manifest-check", Force: true, DryRun: []string{metav1.DryRunAll}})
			if err != nil {
				t.Errorf("%s: %s %s refused: %v", file, gvk.Kind, obj.GetName(), err)
				continue
			}
			applied++
		}
	}
	if applied < 15 {
		t.Fatalf("only %d objects were checked; the manifest list looks wrong", applied)
	}
	t.Logf("%d objects from %d files accepted", applied, len(files))
}
