package clusterid_test

import (
	"context"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	aboutv1beta1 "github.com/mcsd-io/mcsd/apis/about/v1beta1"
	"github.com/mcsd-io/mcsd/clusterid"
	"github.com/mcsd-io/mcsd/test/lib/harness"
)

func TestClusterIDRulesOnARealAPIServer(t *testing.T) {
	cs := harness.Start(t, harness.Options{Clusters: 1})
	c := cs.Members[0]
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	props := c.Dynamic.Resource(aboutv1beta1.SchemeGroupVersion.WithResource(aboutv1beta1.Resource))
	r := clusterid.NewResolver(c.Kube, c.Dynamic)

	property := func(t *testing.T, name string) (string, bool) {
		t.Helper()
		u, err := props.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return "", false
		}
		if err != nil {
			t.Fatal(err)
		}
		v, _, _ := unstructured.NestedString(u.Object, "spec", "value")
		return v, true
	}
	reset := func(t *testing.T) {
		t.Helper()
		for _, name := range []string{aboutv1beta1.ClusterIDName, aboutv1beta1.ClusterSetName} {
			if err := props.Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				t.Fatal(err)
			}
		}
	}
	setProperty := func(t *testing.T, value string) {
		t.Helper()
		u := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": aboutv1beta1.SchemeGroupVersion.String(), "kind": "ClusterProperty",
			"metadata": map[string]any{"name": aboutv1beta1.ClusterIDName},
			"spec":     map[string]any{"value": value},
		}}
		if _, err := props.Create(ctx, u, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	kubeSystem, err := c.Kube.CoreV1().Namespaces().Get(ctx, "kube-system", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}

	t.Run("a reader waits for the property another records, and records nothing", func(t *testing.T) {
		reset(t)
		short, cancelShort := context.WithTimeout(ctx, 1500*time.Millisecond)
		_, err := r.Await(short, "")
		cancelShort()
		if err == nil || !strings.Contains(err.Error(), "controller") {
			t.Fatalf("Await with no property: %v, want an error naming the controller", err)
		}
		if _, ok := property(t, aboutv1beta1.ClusterIDName); ok {
			t.Fatal("Await recorded a cluster ID")
		}
		got := make(chan string, 1)
		go func() {
			id, err := r.Await(ctx, "")
			if err != nil {
				id = err.Error()
			}
			got <- id
		}()
		setProperty(t, "east-1")
		if id := <-got; id != "east-1" {
			t.Fatalf("Await = %q, want the recorded east-1", id)
		}
		if _, err := r.Await(ctx, "west-2"); err == nil || !strings.Contains(err.Error(), "disagrees") {
			t.Fatalf("Await with a disagreeing flag: %v", err)
		}
	})

	t.Run("absent property and no flag: the kube-system UID is used and recorded", func(t *testing.T) {
		reset(t)
		id, err := r.Resolve(ctx, "")
		if err != nil {
			t.Fatal(err)
		}
		if id != string(kubeSystem.UID) {
			t.Fatalf("id %q, want kube-system UID %q", id, kubeSystem.UID)
		}
		if v, ok := property(t, aboutv1beta1.ClusterIDName); !ok || v != id {
			t.Fatalf("property = %q (exists %v), want %q", v, ok, id)
		}
	})

	t.Run("absent property with a flag: the flag is used and recorded", func(t *testing.T) {
		reset(t)
		id, err := r.Resolve(ctx, "east-1")
		if err != nil || id != "east-1" {
			t.Fatalf("Resolve = %q, %v", id, err)
		}
		if v, _ := property(t, aboutv1beta1.ClusterIDName); v != "east-1" {
			t.Fatalf("property = %q, want east-1", v)
		}
	})

	t.Run("present property and no flag: the property is used", func(t *testing.T) {
		reset(t)
		setProperty(t, "west-2")
		if id, err := r.Resolve(ctx, ""); err != nil || id != "west-2" {
			t.Fatalf("Resolve = %q, %v", id, err)
		}
	})

	t.Run("a flag that agrees with the property is accepted", func(t *testing.T) {
		reset(t)
		setProperty(t, "west-2")
		if id, err := r.Resolve(ctx, "west-2"); err != nil || id != "west-2" {
			t.Fatalf("Resolve = %q, %v", id, err)
		}
	})

	t.Run("a flag that disagrees with the property is an error naming both and changes nothing", func(t *testing.T) {
		reset(t)
		setProperty(t, "west-2")
		_, err := r.Resolve(ctx, "east-1")
		if err == nil || !strings.Contains(err.Error(), "west-2") || !strings.Contains(err.Error(), "east-1") {
			t.Fatalf("Resolve error = %v, want one naming west-2 and east-1", err)
		}
		if v, _ := property(t, aboutv1beta1.ClusterIDName); v != "west-2" {
			t.Fatalf("property changed to %q", v)
		}
	})

	t.Run("an invalid flag is refused before anything is written", func(t *testing.T) {
		reset(t)
		_, err := r.Resolve(ctx, "Not_A_Label")
		if err == nil || !strings.Contains(err.Error(), "--cluster-id") {
			t.Fatalf("Resolve error = %v, want one naming --cluster-id", err)
		}
		if _, ok := property(t, aboutv1beta1.ClusterIDName); ok {
			t.Fatal("an invalid ID was recorded")
		}
	})

	t.Run("an invalid recorded property is an error", func(t *testing.T) {
		reset(t)
		setProperty(t, "has.dots.in.it")
		if _, err := r.Resolve(ctx, ""); err == nil || !strings.Contains(err.Error(), "RFC-1123") {
			t.Fatalf("Resolve error = %v, want an RFC-1123 complaint", err)
		}
	})

	t.Run("the API server refuses an empty property value", func(t *testing.T) {
		reset(t)
		u := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": aboutv1beta1.SchemeGroupVersion.String(), "kind": "ClusterProperty",
			"metadata": map[string]any{"name": aboutv1beta1.ClusterIDName},
			"spec":     map[string]any{"value": ""},
		}}
		if _, err := props.Create(ctx, u, metav1.CreateOptions{}); !apierrors.IsInvalid(err) {
			t.Fatalf("creating an empty value: %v, want Invalid", err)
		}
	})

	t.Run("join records membership, rejoining is a no-op, another set is refused, leave removes it", func(t *testing.T) {
		reset(t)
		if err := r.Join(ctx, "prod"); err != nil {
			t.Fatal(err)
		}
		if v, ok := property(t, aboutv1beta1.ClusterSetName); !ok || v != "prod" {
			t.Fatalf("membership property = %q (%v)", v, ok)
		}
		if err := r.Join(ctx, "prod"); err != nil {
			t.Fatalf("rejoining: %v", err)
		}
		if err := r.Join(ctx, "staging"); err == nil || !strings.Contains(err.Error(), "prod") {
			t.Fatalf("joining another set: %v, want an error naming prod", err)
		}
		if err := r.Leave(ctx); err != nil {
			t.Fatal(err)
		}
		if _, ok := property(t, aboutv1beta1.ClusterSetName); ok {
			t.Fatal("membership property survived Leave")
		}
		if err := r.Leave(ctx); err != nil {
			t.Fatalf("leaving twice: %v", err)
		}
	})

	t.Run("the v1alpha1 version serves the same object", func(t *testing.T) {
		reset(t)
		setProperty(t, "same-object")
		alphaGVR := aboutv1beta1.SchemeGroupVersion.WithResource(aboutv1beta1.Resource)
		alphaGVR.Version = "v1alpha1"
		u, err := c.Dynamic.Resource(alphaGVR).Get(ctx, aboutv1beta1.ClusterIDName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if v, _, _ := unstructured.NestedString(u.Object, "spec", "value"); v != "same-object" {
			t.Fatalf("v1alpha1 value %q", v)
		}
	})

	t.Run("the API server refuses a change of the cluster ID or clusterset value (KEP-2149)", func(t *testing.T) {
		reset(t)
		setProperty(t, "immutable-1")
		for _, gvr := range []string{"v1beta1", "v1alpha1"} {
			res := aboutv1beta1.SchemeGroupVersion.WithResource(aboutv1beta1.Resource)
			res.Version = gvr
			u, err := c.Dynamic.Resource(res).Get(ctx, aboutv1beta1.ClusterIDName, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if err := unstructured.SetNestedField(u.Object, "immutable-2", "spec", "value"); err != nil {
				t.Fatal(err)
			}
			_, err = c.Dynamic.Resource(res).Update(ctx, u, metav1.UpdateOptions{})
			if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "cannot change") {
				t.Fatalf("%s: changing %s: %v, want Invalid", gvr, aboutv1beta1.ClusterIDName, err)
			}
		}
		if v, _ := property(t, aboutv1beta1.ClusterIDName); v != "immutable-1" {
			t.Fatalf("value %q after refused updates", v)
		}
		// Rewriting the same value, and deleting, stay allowed.
		u, err := props.Get(ctx, aboutv1beta1.ClusterIDName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		u.SetLabels(map[string]string{"touched": "yes"})
		if _, err := props.Update(ctx, u, metav1.UpdateOptions{}); err != nil {
			t.Fatalf("an update keeping the value: %v", err)
		}

		set := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": aboutv1beta1.SchemeGroupVersion.String(), "kind": "ClusterProperty",
			"metadata": map[string]any{"name": aboutv1beta1.ClusterSetName},
			"spec":     map[string]any{"value": "set-a"},
		}}
		if _, err := props.Create(ctx, set, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		set, err = props.Get(ctx, aboutv1beta1.ClusterSetName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		_ = unstructured.SetNestedField(set.Object, "set-b", "spec", "value")
		if _, err := props.Update(ctx, set, metav1.UpdateOptions{}); !apierrors.IsInvalid(err) {
			t.Fatalf("changing %s: %v, want Invalid", aboutv1beta1.ClusterSetName, err)
		}

		other := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": aboutv1beta1.SchemeGroupVersion.String(), "kind": "ClusterProperty",
			"metadata": map[string]any{"name": "region.example.com"},
			"spec":     map[string]any{"value": "eu-1"},
		}}
		if other, err = props.Create(ctx, other, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		_ = unstructured.SetNestedField(other.Object, "eu-2", "spec", "value")
		if _, err := props.Update(ctx, other, metav1.UpdateOptions{}); err != nil {
			t.Fatalf("other properties stay mutable: %v", err)
		}
		_ = props.Delete(ctx, "region.example.com", metav1.DeleteOptions{})
		reset(t)
	})
}
