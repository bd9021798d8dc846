package charts_test

import (
	"maps"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/mcsd-io/mcsd/charts"
)

// rendered are the objects of the chart with values, those helm install
// applies and those helm test creates.
func rendered(t *testing.T, r charts.Renderer, values map[string]any) []*unstructured.Unstructured {
	t.Helper()
	objs, err := r.Objects("mcsd-system", values)
	if err != nil {
		t.Fatal(err)
	}
	hooks, err := charts.TestHooks("mcsd-system", values)
	if err != nil {
		t.Fatal(err)
	}
	if r.ManagedBy != "" {
		// TestHooks are Helm's alone: helm test creates them.
		hooks = nil
	}
	return append(objs, hooks...)
}

// Every object, and every pod a workload makes, carries the recommended
// labels: the release, the chart's appVersion and version, the manager
// (Helm, or kubectl for manifests/mcsd) and the component.
func TestEveryObjectCarriesTheStandardLabels(t *testing.T) {
	c, err := charts.Load()
	if err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		r      charts.Renderer
		values map[string]any
	}{
		"default values":   {charts.Renderer{}, nil},
		"every value set":  {charts.Renderer{}, everyValue()},
		"manifests/mcsd":   {charts.Renderer{ManagedBy: charts.ManifestsManager}, charts.ManifestValues()},
		"a priority class": {charts.Renderer{}, map[string]any{"priorityClass": map[string]any{"create": true}}},
	} {
		t.Run(name, func(t *testing.T) {
			manager := "Helm"
			if tc.r.ManagedBy != "" {
				manager = tc.r.ManagedBy
			}
			want := map[string]string{
				"app.kubernetes.io/name":       "mcsd",
				"app.kubernetes.io/instance":   charts.ReleaseName,
				"app.kubernetes.io/version":    c.Metadata.AppVersion,
				"app.kubernetes.io/part-of":    "mcsd",
				"app.kubernetes.io/managed-by": manager,
				"helm.sh/chart":                "mcsd-" + c.Metadata.Version,
			}
			components := map[string]bool{}
			for _, o := range rendered(t, tc.r, tc.values) {
				what := o.GetKind() + " " + o.GetName()
				labels := o.GetLabels()
				checkLabels(t, what, labels, want)
				components[labels["app.kubernetes.io/component"]] = true
				if template, ok, _ := unstructured.NestedStringMap(o.Object, "spec", "template", "metadata", "labels"); ok {
					checkLabels(t, what+"'s pods", template, want)
					if template["app.kubernetes.io/component"] != labels["app.kubernetes.io/component"] {
						t.Errorf("%s's pods are of component %q, it of %q", what, template["app.kubernetes.io/component"], labels["app.kubernetes.io/component"])
					}
				}
			}
			for _, component := range []string{"node-agent", "controller"} {
				if !components[component] {
					t.Errorf("no object of component %s among %v", component, components)
				}
			}
		})
	}
}

func checkLabels(t *testing.T, what string, labels, want map[string]string) {
	t.Helper()
	for k, v := range want {
		if labels[k] != v {
			t.Errorf("%s: label %s is %q, want %q", what, k, labels[k], v)
		}
	}
	if labels["app.kubernetes.io/component"] == "" {
		t.Errorf("%s: no label app.kubernetes.io/component", what)
	}
}

// Workloads select their pods, and the DNS Service the node agents, by the
// name and the component alone: nothing a release, a version, a value or
// the manager changes, since a workload's selector cannot change. The
// selectors are those of every earlier mcsd, so that an upgrade applies.
func TestSelectorsStayTheSameAcrossReleases(t *testing.T) {
	selectors := func(r charts.Renderer, values map[string]any) map[string]map[string]string {
		t.Helper()
		out := map[string]map[string]string{}
		for _, o := range rendered(t, r, values) {
			key := o.GetKind() + " " + o.GetName()
			switch o.GetKind() {
			case "DaemonSet":
				var ds appsv1.DaemonSet
				convert(t, o, &ds)
				out[key] = ds.Spec.Selector.MatchLabels
				if len(ds.Spec.Selector.MatchExpressions) > 0 {
					t.Errorf("%s selects by expressions too", key)
				}
			case "Deployment":
				var d appsv1.Deployment
				convert(t, o, &d)
				out[key] = d.Spec.Selector.MatchLabels
				out[key+" anti-affinity"] = d.Spec.Template.Spec.Affinity.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution[0].PodAffinityTerm.LabelSelector.MatchLabels
			case "PodDisruptionBudget":
				var pdb policyv1.PodDisruptionBudget
				convert(t, o, &pdb)
				out[key] = pdb.Spec.Selector.MatchLabels
			case "Service":
				var svc corev1.Service
				convert(t, o, &svc)
				out[key] = svc.Spec.Selector
			}
		}
		return out
	}
	want := map[string]map[string]string{
		"DaemonSet mcsd-node-agent":                {"app.kubernetes.io/name": "mcsd", "app.kubernetes.io/component": "node-agent"},
		"Service mcsd-dns":                         {"app.kubernetes.io/name": "mcsd", "app.kubernetes.io/component": "node-agent"},
		"Deployment mcsd-controller":               {"app.kubernetes.io/name": "mcsd", "app.kubernetes.io/component": "controller"},
		"Deployment mcsd-controller anti-affinity": {"app.kubernetes.io/name": "mcsd", "app.kubernetes.io/component": "controller"},
		"PodDisruptionBudget mcsd-controller":      {"app.kubernetes.io/name": "mcsd", "app.kubernetes.io/component": "controller"},
	}
	for name, got := range map[string]map[string]map[string]string{
		"default values":  selectors(charts.Renderer{}, nil),
		"every value set": selectors(charts.Renderer{}, everyValue()),
		"manifests/mcsd":  selectors(charts.Renderer{ManagedBy: charts.ManifestsManager}, charts.ManifestValues()),
	} {
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s: selectors (-want +got):\n%s", name, diff)
		}
	}
}

// image.digest pins every container of the chart, the test's too, to
// repository@digest whatever the tag.
func TestImageDigestOverridesTheTag(t *testing.T) {
	const digest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	values := map[string]any{"image": map[string]any{"repository": "registry.example.com/mcsd", "tag": "v1.2.3", "digest": digest}}
	images := 0
	for _, o := range rendered(t, charts.Renderer{}, values) {
		containers, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
		if o.GetKind() == "Pod" {
			containers, _, _ = unstructured.NestedSlice(o.Object, "spec", "containers")
		}
		for _, c := range containers {
			images++
			if got := c.(map[string]any)["image"]; got != "registry.example.com/mcsd@"+digest {
				t.Errorf("%s %s: image %v, want the digest", o.GetKind(), o.GetName(), got)
			}
		}
	}
	if images != 3 {
		t.Errorf("%d containers, want the node agent's, the controller's and the test's", images)
	}
}

// The node agent runs as kube-proxy does, system-node-critical, and the
// controller system-cluster-critical, with CPU and memory requests; no
// PriorityClass of mcsd's own is made unless asked for.
func TestDefaultPrioritiesAndRequests(t *testing.T) {
	objs, err := charts.Objects("mcsd-system", nil)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, o := range objs {
		if o.GetKind() == "PriorityClass" {
			t.Errorf("a PriorityClass %s by default", o.GetName())
		}
		var spec corev1.PodSpec
		switch o.GetKind() {
		case "DaemonSet":
			var ds appsv1.DaemonSet
			convert(t, o, &ds)
			spec = ds.Spec.Template.Spec
		case "Deployment":
			var d appsv1.Deployment
			convert(t, o, &d)
			spec = d.Spec.Template.Spec
		default:
			continue
		}
		got[o.GetKind()] = spec.PriorityClassName
		r := spec.Containers[0].Resources.Requests
		if r.Cpu().IsZero() || r.Memory().IsZero() {
			t.Errorf("%s: requests %v, want CPU and memory", o.GetKind(), r)
		}
		if o.GetKind() == "DaemonSet" && r.Cpu().MilliValue() < 100 {
			t.Errorf("the node agent requests %v CPU, want CoreDNS's 100m at least: it answers the node's DNS", r.Cpu())
		}
		if p := spec.Containers[0].StartupProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/livez" {
			t.Errorf("%s: startup probe %+v, want one on /livez", o.GetKind(), p)
		}
	}
	if want := map[string]string{"DaemonSet": "system-node-critical", "Deployment": "system-cluster-critical"}; !maps.Equal(got, want) {
		t.Errorf("priority classes %v, want %v", got, want)
	}
}

// The update strategies are the values' own, and a strategy type other
// than RollingUpdate drops the rolling update's parameters, which the API
// server would refuse with it.
func TestUpdateStrategies(t *testing.T) {
	objs, err := charts.Objects("mcsd-system", map[string]any{
		"nodeAgent":  map[string]any{"updateStrategy": map[string]any{"type": "OnDelete"}},
		"controller": map[string]any{"updateStrategy": map[string]any{"rollingUpdate": map[string]any{"maxSurge": 1, "maxUnavailable": 0}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		switch o.GetKind() {
		case "DaemonSet":
			var ds appsv1.DaemonSet
			convert(t, o, &ds)
			if s := ds.Spec.UpdateStrategy; s.Type != appsv1.OnDeleteDaemonSetStrategyType || s.RollingUpdate != nil {
				t.Errorf("node agent: %+v, want OnDelete alone", s)
			}
		case "Deployment":
			var d appsv1.Deployment
			convert(t, o, &d)
			if s := d.Spec.Strategy; s.Type != appsv1.RollingUpdateDeploymentStrategyType || s.RollingUpdate.MaxSurge.IntValue() != 1 || s.RollingUpdate.MaxUnavailable.IntValue() != 0 {
				t.Errorf("controller: %+v, want a surge of 1 and none unavailable", s)
			}
		}
	}
}

// A pod label may add to the chart's labels but not replace one: the
// selectors would no longer find the pods.
func TestPodLabelsCannotReplaceTheChartsLabels(t *testing.T) {
	for _, label := range []string{"app.kubernetes.io/name", "app.kubernetes.io/component", "app.kubernetes.io/instance", "helm.sh/chart"} {
		_, err := charts.Render("mcsd-system", map[string]any{"controller": map[string]any{"podLabels": map[string]any{label: "x"}}})
		if err == nil || !strings.Contains(err.Error(), "controller.podLabels: "+label) {
			t.Errorf("podLabels %s: %v, want an error naming it", label, err)
		}
	}
}
