package charts_test

import (
	"slices"
	"strings"
	"testing"

	"helm.sh/helm/v4/pkg/chart/common"
	chartutil "helm.sh/helm/v4/pkg/chart/common/util"
	"helm.sh/helm/v4/pkg/engine"
	release "helm.sh/helm/v4/pkg/release/v1"
	releaseutil "helm.sh/helm/v4/pkg/release/v1/util"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/mcsd-io/mcsd/charts"
)

// helmRelease is how Helm's install splits the chart rendered with values
// in namespace: the objects it applies and the hooks it keeps for their
// events (its own releaseutil.SortManifests over its engine's output), and
// the notes it prints (templates/NOTES.txt).
func helmRelease(t *testing.T, namespace string, values map[string]any) (objs, hooks []*unstructured.Unstructured, notes string) {
	t.Helper()
	c, err := charts.Load()
	if err != nil {
		t.Fatal(err)
	}
	top, err := chartutil.ToRenderValues(c, values, common.ReleaseOptions{Name: charts.ReleaseName, Namespace: namespace, IsInstall: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	files, err := engine.Engine{Strict: true}.Render(c, top)
	if err != nil {
		t.Fatal(err)
	}
	notes = files["mcsd/templates/NOTES.txt"]
	delete(files, "mcsd/templates/NOTES.txt")
	hs, manifests, err := releaseutil.SortManifests(files, nil, releaseutil.InstallOrder)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range manifests {
		docs, err := charts.Documents([]byte(m.Content))
		if err != nil {
			t.Fatal(err)
		}
		objs = append(objs, docs...)
	}
	for _, h := range hs {
		if !slices.Contains(h.Events, release.HookTest) {
			t.Errorf("a hook %s %s not of helm test", h.Kind, h.Name)
		}
		docs, err := charts.Documents([]byte(h.Manifest))
		if err != nil {
			t.Fatal(err)
		}
		hooks = append(hooks, docs...)
	}
	return objs, hooks, notes
}

// What Render, TestHooks and Notes give is what helm install applies, what
// helm test creates and what helm install prints.
func TestRenderingIsHelmInstalls(t *testing.T) {
	for name, values := range map[string]map[string]any{"default values": nil, "every value set": everyValue()} {
		t.Run(name, func(t *testing.T) {
			fromHelm, hooks, helmNotes := helmRelease(t, "mcs", values)
			objs, err := charts.Objects("mcs", values)
			if err != nil {
				t.Fatal(err)
			}
			if want, got := keys(fromHelm), keys(objs); !slices.Equal(want, got) || len(got) < 15 {
				t.Errorf("helm install applies %v, Objects renders %v", want, got)
			}
			testHooks, err := charts.TestHooks("mcs", values)
			if err != nil {
				t.Fatal(err)
			}
			if want, got := keys(hooks), keys(testHooks); !slices.Equal(want, got) || len(got) != 4 {
				t.Errorf("helm's hooks are %v, TestHooks %v", want, got)
			}
			notes, err := charts.Notes("mcs", values)
			if err != nil {
				t.Fatal(err)
			}
			if helmNotes != notes || notes == "" {
				t.Errorf("helm install prints:\n%s\nNotes says:\n%s", helmNotes, notes)
			}
		})
	}
}

func keys(objs []*unstructured.Unstructured) []string {
	var out []string
	for _, o := range objs {
		out = append(out, o.GetKind()+"/"+o.GetNamespace()+"/"+o.GetName())
	}
	slices.Sort(out)
	return out
}

// helm test creates the test's identity, then its pod: mcsd's own image
// running mcsd probe install in the release's namespace, within the
// restricted Pod Security profile, with the registry credentials and
// where the controller may run; the identity reads the objects the probe
// checks and nothing else. The identity goes when the test passes; the
// pod stays for its log until the next test.
func TestTestHook(t *testing.T) {
	values := everyValue()
	hooks, err := charts.TestHooks("mcs", values)
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, h := range hooks {
		kinds = append(kinds, h.GetKind())
		policy := h.GetAnnotations()["helm.sh/hook-delete-policy"]
		if want := "before-hook-creation,hook-succeeded"; h.GetKind() == "Pod" {
			if policy != "before-hook-creation" {
				t.Errorf("the test pod's delete policy is %q, want it kept after the test", policy)
			}
		} else if policy != want {
			t.Errorf("%s's delete policy is %q, want %q", h.GetKind(), policy, want)
		}
		if h.GetNamespace() != "mcs" {
			t.Errorf("%s %s in namespace %q", h.GetKind(), h.GetName(), h.GetNamespace())
		}
	}
	if want := []string{"ServiceAccount", "Role", "RoleBinding", "Pod"}; !slices.Equal(kinds, want) {
		t.Fatalf("helm test creates %v, want %v in that order", kinds, want)
	}

	var role rbacv1.Role
	convert(t, hooks[1], &role)
	var reads []string
	for _, r := range role.Rules {
		for _, res := range r.Resources {
			reads = append(reads, strings.Join(r.Verbs, ",")+" "+res+" "+strings.Join(r.ResourceNames, ","))
		}
	}
	if want := []string{"get daemonsets mcsd-node-agent", "get deployments mcsd-controller", "get services mcsd-dns", "list pods "}; !slices.Equal(reads, want) {
		t.Errorf("the test may %q, want %q", reads, want)
	}

	var pod corev1.Pod
	convert(t, hooks[3], &pod)
	c := pod.Spec.Containers[0]
	if want := []string{"probe", "install", "--namespace=mcs"}; !slices.Equal(c.Args[:3], want) {
		t.Errorf("the test runs %q, want %q first", c.Args, want)
	}
	if c.Image != "registry.example.com/mcsd:v1.2.3" || c.ImagePullPolicy != corev1.PullAlways {
		t.Errorf("the test runs image %s (%s)", c.Image, c.ImagePullPolicy)
	}
	if pod.Spec.ServiceAccountName != "mcsd-test" || pod.Spec.RestartPolicy != corev1.RestartPolicyNever {
		t.Errorf("the test pod runs as %q, restart policy %q", pod.Spec.ServiceAccountName, pod.Spec.RestartPolicy)
	}
	if len(pod.Spec.ImagePullSecrets) != 1 || pod.Spec.NodeSelector["node-role.kubernetes.io/control-plane"] != "" || len(pod.Spec.Tolerations) != 1 {
		t.Errorf("the test pod: pull secrets %v, node selector %v, tolerations %v", pod.Spec.ImagePullSecrets, pod.Spec.NodeSelector, pod.Spec.Tolerations)
	}
	if sc := pod.Spec.SecurityContext; sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || c.SecurityContext == nil || c.SecurityContext.AllowPrivilegeEscalation == nil || *c.SecurityContext.AllowPrivilegeEscalation {
		t.Errorf("the test pod is not restricted: %+v %+v", sc, c.SecurityContext)
	}
}

// The notes say what was installed and where, that join --install=false
// comes next (with the cluster's values), and how to check.
func TestNotes(t *testing.T) {
	notes, err := charts.Notes("mcsd-system", map[string]any{"clusterID": "east", "podCIDRs": []any{"10.244.0.0/16", "fd00:10:244::/56"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Log(notes)
	for _, want := range []string{
		"is installed in namespace mcsd-system",
		"DaemonSet  mcsd-node-agent", "Deployment mcsd-controller  2 replicas", "Service    mcsd-dns",
		"kubectl mcs join --broker-context BROKER --context MEMBER --install=false --cluster-id east --pod-cidrs 10.244.0.0/16,fd00:10:244::/56\n",
		"helm test mcsd -n mcsd-system --logs", "kubectl mcs status --context MEMBER", "kubectl mcs verify --contexts MEMBER,OTHER",
	} {
		if !strings.Contains(notes, want) {
			t.Errorf("the notes do not say %q", want)
		}
	}
	if strings.Contains(notes, "--no-secret") {
		t.Errorf("the notes work around a namespace join serves")
	}

	// In a namespace or with a Secret join does not write, the notes say
	// how to put the credential and the DNS where this release reads them.
	notes, err = charts.Notes("mcs", map[string]any{"controller": map[string]any{"brokerSecret": "broker-east"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"--no-secret --dns=skip", "kubectl -n mcs create secret generic broker-east --from-file=kubeconfig=broker.kubeconfig", "mcsd-dns.mcs.svc"} {
		if !strings.Contains(notes, want) {
			t.Errorf("in namespace mcs the notes do not say %q:\n%s", want, notes)
		}
	}
}
