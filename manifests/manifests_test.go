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

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/yaml"

	"github.com/mcsd-io/mcsd/test/lib/harness"
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
		for _, doc := range documents(t, file) {
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

// The controller's pods meet the restricted Pod Security profile, and the
// node agent's the privileged one its namespace enforces: a real API
// server's PodSecurity admission judges each pod template, created (dry
// run) in a namespace enforcing that profile.
func TestPodsMeetTheirPodSecurityProfiles(t *testing.T) {
	cs := harness.Start(t, harness.Options{Clusters: 1})
	c := cs.Members[0]
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var deploy appsv1.Deployment
	var ds appsv1.DaemonSet
	readManifest(t, "mcsd/controller.yaml", "Deployment", &deploy)
	readManifest(t, "mcsd/node-agent.yaml", "DaemonSet", &ds)
	var nsObj corev1.Namespace
	readManifest(t, "mcsd/namespace.yaml", "Namespace", &nsObj)
	if got := nsObj.Labels["pod-security.kubernetes.io/enforce"]; got != "privileged" {
		t.Errorf("mcsd's namespace enforces %q, want privileged (the node agent's hostNetwork and NET_ADMIN)", got)
	}
	for _, tc := range []struct {
		level    string
		template corev1.PodTemplateSpec
		allowed  bool
	}{
		{"restricted", deploy.Spec.Template, true},
		{"baseline", ds.Spec.Template, false},
		{"privileged", ds.Spec.Template, true},
	} {
		ns := "psa-" + tc.level
		if _, err := c.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{"pod-security.kubernetes.io/enforce": tc.level}}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "check"}, Spec: tc.template.Spec}
		pod.Spec.ServiceAccountName = ""
		pod.Spec.PriorityClassName = ""
		_, err := c.Kube.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if tc.allowed && err != nil {
			t.Errorf("%s: a pod of %s refused: %v", tc.level, pod.Spec.Containers[0].Args[0], err)
		}
		if !tc.allowed && !apierrors.IsForbidden(err) {
			t.Errorf("%s: a pod of %s: %v, want it refused (the profile the namespace needs is wrong otherwise)", tc.level, pod.Spec.Containers[0].Args[0], err)
		}
	}
}

// A member's manifests never include the CRDs: deleting mcsd from a
// cluster that is also the broker must not delete every member's records.
func TestMemberManifestsLeaveTheCRDsOut(t *testing.T) {
	var k struct {
		Resources []string `json:"resources"`
	}
	data, err := os.ReadFile("mcsd/kustomization.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, &k); err != nil {
		t.Fatal(err)
	}
	for _, r := range k.Resources {
		data, err := os.ReadFile(filepath.Join("mcsd", r))
		if err != nil {
			t.Errorf("manifests/mcsd includes %s: %v (another kustomization is not allowed either)", r, err)
			continue
		}
		if bytes.Contains(data, []byte("kind: CustomResourceDefinition")) {
			t.Errorf("manifests/mcsd/%s holds a CustomResourceDefinition", r)
		}
	}
}

// readManifest reads the one object of kind in file.
func readManifest(t *testing.T, file, kind string, into any) {
	t.Helper()
	for _, doc := range documents(t, file) {
		var meta metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &meta); err != nil {
			t.Fatal(err)
		}
		if meta.Kind == kind {
			if err := yaml.UnmarshalStrict(doc, into); err != nil {
				t.Fatalf("%s: %v", file, err)
			}
			return
		}
	}
	t.Fatalf("%s: no %s", file, kind)
}

// documents are the YAML documents of file.
func documents(t *testing.T, file string) [][]byte {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var docs [][]byte
	reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			return docs
		}
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		docs = append(docs, doc)
	}
}
