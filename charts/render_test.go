package charts_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"helm.sh/helm/v4/pkg/chart/v2/lint"
	"helm.sh/helm/v4/pkg/chart/v2/lint/support"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	"github.com/mcsd-io/mcsd/charts"
)

// Helm's own linter finds nothing to warn about, with the default values
// and with every value set.
func TestChartPassesHelmLint(t *testing.T) {
	for name, values := range map[string]map[string]any{"default values": nil, "every value set": everyValue()} {
		t.Run(name, func(t *testing.T) {
			result := lint.RunAll("mcsd", values, "mcsd-system")
			for _, m := range result.Messages {
				t.Log(m)
			}
			if result.HighestSeverity >= support.WarningSev {
				t.Fatalf("helm lint: %d messages, the worst of severity %d", len(result.Messages), result.HighestSeverity)
			}
		})
	}
}

// manifests/mcsd is the chart's rendering with the default values: editing
// either alone fails here (make manifests writes it).
func TestManifestsAreTheChartsRendering(t *testing.T) {
	want, err := charts.Manifests()
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range want {
		got, err := os.ReadFile(filepath.Join("..", "manifests", "mcsd", name))
		if err != nil {
			t.Errorf("manifests/mcsd/%s: %v (run make manifests)", name, err)
			continue
		}
		if string(got) != string(data) {
			t.Errorf("manifests/mcsd/%s is not the chart's rendering: run make manifests", name)
		}
	}
	files, err := filepath.Glob(filepath.Join("..", "manifests", "mcsd", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := want[filepath.Base(file)]; !ok && strings.HasPrefix(string(data), charts.GeneratedMarker) {
			t.Errorf("%s was generated from a template the chart no longer has: run make manifests", file)
		}
	}
}

// The crds/ directory of the chart holds the CRDs of manifests/crds, byte
// for byte.
func TestChartCRDsAreManifestsCRDs(t *testing.T) {
	c, err := charts.Load()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range c.CRDObjects() {
		got = append(got, filepath.Base(f.Filename))
		want, err := os.ReadFile(filepath.Join("..", "manifests", "crds", filepath.Base(f.Filename)))
		if err != nil {
			t.Errorf("%s: %v", f.Filename, err)
			continue
		}
		if string(want) != string(f.File.Data) {
			t.Errorf("%s differs from manifests/crds: run make manifests", f.Filename)
		}
	}
	want, err := filepath.Glob(filepath.Join("..", "manifests", "crds", "*_*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) || len(got) != 3 {
		t.Errorf("the chart has CRDs %v, manifests/crds %v", got, want)
	}
}

// everyValue sets every value of the chart away from its default.
func everyValue() map[string]any {
	return map[string]any{
		"image":            map[string]any{"repository": "registry.example.com/mcsd", "tag": "v1.2.3", "pullPolicy": "Always"},
		"imagePullSecrets": []any{map[string]any{"name": "regcred"}},
		"namespace":        map[string]any{"create": true},
		"clusterID":        "east",
		"podCIDRs":         []any{"10.244.0.0/16", "fd00:10:244::/56"},
		"clustersetCIDRs":  []any{"10.96.0.0/12"},
		"vipBlockBits":     map[string]any{"ipv4": 20, "ipv6": 80},
		"ipFamilies":       []any{"IPv4"},
		"ports":            map[string]any{"dns": 20053, "health": 20054, "metrics": 20055},
		"metrics":          map[string]any{"bindAddress": "$(POD_IP)", "tlsSecret": "mcsd-metrics-tls", "readers": []any{map[string]any{"namespace": "monitoring", "name": "prometheus-k8s"}}},
		"priorityClass":    map[string]any{"create": true, "name": "mcsd-critical", "value": 999},
		"prometheusRule":   map[string]any{"enabled": true, "labels": map[string]any{"release": "kube-prometheus-stack"}},
		"grafanaDashboard": map[string]any{"enabled": true, "namespace": "monitoring", "labels": map[string]any{"grafana_dashboard": "mcs"}, "annotations": map[string]any{"grafana_folder": "Networking"}},
		"podMonitor":       map[string]any{"enabled": true, "interval": "15s", "labels": map[string]any{"release": "kube-prometheus-stack"}, "tlsConfig": map[string]any{"serverName": "mcsd-metrics.mcs.svc"}},
		"logVerbosity":     4,
		"nodeAgent": map[string]any{
			"priorityClassName": "mcsd-critical",
			"resources":         map[string]any{"requests": map[string]any{"cpu": "200m", "memory": "128Mi"}},
			"updateStrategy":    map[string]any{"rollingUpdate": map[string]any{"maxUnavailable": "10%"}},
			"podLabels":         map[string]any{"team": "net"},
			"podAnnotations":    map[string]any{"example.com/scrape": "true"},
			"tolerations":       []any{map[string]any{"key": "dedicated", "operator": "Equal", "value": "net", "effect": "NoSchedule"}},
			"nodeSelector":      map[string]any{"kubernetes.io/os": "linux"},
			"extraArgs":         []any{"--proxier-mode=auto"},
		},
		"controller": map[string]any{
			"replicas":          3,
			"brokerSecret":      "broker-east",
			"priorityClassName": "high",
			"resources":         map[string]any{"limits": map[string]any{"memory": "2Gi"}},
			"updateStrategy":    map[string]any{"type": "Recreate"},
			"podLabels":         map[string]any{"team": "mcs"},
			"podAnnotations":    map[string]any{"example.com/owner": "mcs"},
			"tolerations":       []any{map[string]any{"key": "CriticalAddonsOnly", "operator": "Exists"}},
			"nodeSelector":      map[string]any{"node-role.kubernetes.io/control-plane": ""},
			"extraArgs":         []any{"--exporter-workers=8"},
		},
	}
}

// Every value reaches the objects it is for, in the release's namespace.
func TestValuesReachTheirObjects(t *testing.T) {
	objs, err := charts.Objects("mcs", everyValue())
	if err != nil {
		t.Fatal(err)
	}
	var ds appsv1.DaemonSet
	var deploy appsv1.Deployment
	var ns corev1.Namespace
	var binding rbacv1.RoleBinding
	clusterBindings := map[string]rbacv1.ClusterRoleBinding{}
	var reader rbacv1.ClusterRole
	kinds := map[string]int{}
	for _, o := range objs {
		kinds[o.GetKind()]++
		if o.GetKind() != "Namespace" && !strings.HasPrefix(o.GetKind(), "Cluster") && !strings.HasPrefix(o.GetKind(), "ValidatingAdmission") && o.GetKind() != "PriorityClass" && o.GetNamespace() != "mcs" && o.GetName() != "mcsd-grafana-dashboard" {
			t.Errorf("%s %s is in namespace %q, want the release's, mcs", o.GetKind(), o.GetName(), o.GetNamespace())
		}
		switch o.GetKind() {
		case "DaemonSet":
			convert(t, o, &ds)
		case "Deployment":
			convert(t, o, &deploy)
		case "Namespace":
			convert(t, o, &ns)
		case "RoleBinding":
			if o.GetName() == "mcsd-controller" {
				convert(t, o, &binding)
			}
		case "ClusterRoleBinding":
			var b rbacv1.ClusterRoleBinding
			convert(t, o, &b)
			clusterBindings[b.Name] = b
		case "ClusterRole":
			if o.GetName() == "mcsd-metrics-reader" {
				convert(t, o, &reader)
			}
		case "PodMonitor":
			endpoints, _, _ := unstructured.NestedSlice(o.Object, "spec", "podMetricsEndpoints")
			if len(endpoints) != 1 || endpoints[0].(map[string]any)["port"] != "metrics" || endpoints[0].(map[string]any)["interval"] != "15s" {
				t.Errorf("PodMonitor endpoints %v, want the metrics port every 15s", endpoints)
			}
			// Over HTTPS, with the scraper's token, verifying as asked.
			endpoint := endpoints[0].(map[string]any)
			secret, _, _ := unstructured.NestedString(endpoint, "authorization", "credentials", "name")
			serverName, _, _ := unstructured.NestedString(endpoint, "tlsConfig", "serverName")
			if endpoint["scheme"] != "https" || secret != "mcsd-metrics-scraper-token" || serverName != "mcsd-metrics.mcs.svc" {
				t.Errorf("PodMonitor endpoint %v, want https with the token of mcsd-metrics-scraper-token and podMonitor.tlsConfig", endpoint)
			}
			if o.GetLabels()["release"] != "kube-prometheus-stack" {
				t.Errorf("PodMonitor labelled %v, without podMonitor.labels", o.GetLabels())
			}
		case "PrometheusRule":
			// The plain rules file, whole, with the labels asked for.
			file, err := os.ReadFile("mcsd/files/prometheus-rules.yaml")
			if err != nil {
				t.Fatal(err)
			}
			var want map[string]any
			if err := yaml.Unmarshal(file, &want); err != nil {
				t.Fatal(err)
			}
			spec, _, _ := unstructured.NestedMap(o.Object, "spec")
			if diff := cmp.Diff(want, spec); diff != "" {
				t.Errorf("the PrometheusRule's spec is not files/prometheus-rules.yaml (-file +rule):\n%s", diff)
			}
			if o.GetLabels()["release"] != "kube-prometheus-stack" {
				t.Errorf("PrometheusRule labelled %v, without prometheusRule.labels", o.GetLabels())
			}
		case "ConfigMap":
			if o.GetName() != "mcsd-grafana-dashboard" {
				break
			}
			kinds["dashboard"]++
			file, err := os.ReadFile("mcsd/files/grafana-dashboard.json")
			if err != nil {
				t.Fatal(err)
			}
			data, _, _ := unstructured.NestedString(o.Object, "data", "mcsd.json")
			if data != strings.TrimSpace(string(file)) {
				t.Errorf("the dashboard ConfigMap's mcsd.json is not files/grafana-dashboard.json")
			}
			if o.GetNamespace() != "monitoring" || o.GetLabels()["grafana_dashboard"] != "mcs" || o.GetAnnotations()["grafana_folder"] != "Networking" {
				t.Errorf("dashboard ConfigMap in %q, labelled %v, annotated %v: without grafanaDashboard's namespace, labels and annotations",
					o.GetNamespace(), o.GetLabels(), o.GetAnnotations())
			}
		case "ValidatingAdmissionPolicy":
			expr, _, _ := unstructured.NestedSlice(o.Object, "spec", "matchConditions")
			if len(expr) != 1 || !strings.Contains(expr[0].(map[string]any)["expression"].(string), `"system:serviceaccount:mcs:mcsd-node-agent"`) {
				t.Errorf("the node-report policy matches %v, want the node agent of namespace mcs", expr)
			}
		}
	}
	if kinds["PodMonitor"] != 1 {
		t.Errorf("podMonitor.enabled true rendered %d PodMonitors", kinds["PodMonitor"])
	}
	if kinds["PrometheusRule"] != 1 {
		t.Errorf("prometheusRule.enabled true rendered %d PrometheusRules", kinds["PrometheusRule"])
	}
	if kinds["dashboard"] != 1 {
		t.Errorf("grafanaDashboard.enabled true rendered %d dashboard ConfigMaps", kinds["dashboard"])
	}
	if kinds["PriorityClass"] != 1 {
		t.Errorf("priorityClass.create true rendered %d PriorityClasses", kinds["PriorityClass"])
	}
	// mcsd's identities may have tokens and accesses reviewed; readers,
	// and the PodMonitor's scraper, may get /metrics.
	for name, want := range map[string][]string{
		"mcsd-auth-delegator":  {"system:auth-delegator", "mcs/mcsd-controller", "mcs/mcsd-node-agent"},
		"mcsd-metrics-reader":  {"mcsd-metrics-reader", "monitoring/prometheus-k8s"},
		"mcsd-metrics-scraper": {"mcsd-metrics-reader", "mcs/mcsd-metrics-scraper"},
	} {
		b := clusterBindings[name]
		got := []string{b.RoleRef.Name}
		for _, s := range b.Subjects {
			got = append(got, s.Namespace+"/"+s.Name)
		}
		if !slices.Equal(got, want) {
			t.Errorf("ClusterRoleBinding %s binds %v, want %v", name, got, want)
		}
	}
	if want := []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}}; !cmp.Equal(reader.Rules, want) {
		t.Errorf("ClusterRole mcsd-metrics-reader grants %+v, want %+v", reader.Rules, want)
	}
	if ns.Name != "mcs" || ns.Labels["pod-security.kubernetes.io/enforce"] != "privileged" {
		t.Errorf("namespace %q labelled %v, want mcs enforcing privileged", ns.Name, ns.Labels)
	}
	if len(binding.Subjects) != 1 || binding.Subjects[0].Namespace != "mcs" {
		t.Errorf("the controller's RoleBinding binds %v, want its ServiceAccount in mcs", binding.Subjects)
	}
	if deploy.Spec.Replicas == nil || *deploy.Spec.Replicas != 3 {
		t.Errorf("controller replicas %v, want 3", deploy.Spec.Replicas)
	}

	agent, ctrl := ds.Spec.Template.Spec, deploy.Spec.Template.Spec
	for _, tc := range []struct {
		what          string
		spec          corev1.PodSpec
		meta          metav1.ObjectMeta
		priorityClass string
		args          []string
	}{
		{"node agent", agent, ds.Spec.Template.ObjectMeta, "mcsd-critical", []string{
			"--leader-elect-namespace=mcs", "--dns-listen=[$(POD_IP)]:20053", "--health-address=[$(POD_IP)]:20054",
			"--metrics-address=[$(POD_IP)]:20055", "--metrics-tls-cert-file=/etc/mcsd/metrics-tls/tls.crt", "--metrics-tls-private-key-file=/etc/mcsd/metrics-tls/tls.key",
			"--cluster-id=east", "--clusterset-cidrs=10.96.0.0/12", "--ip-families=IPv4", "--v=4", "--proxier-mode=auto"}},
		{"controller", ctrl, deploy.Spec.Template.ObjectMeta, "high", []string{
			"--broker-secret=mcs/broker-east", "--leader-elect-namespace=mcs", "--health-address=:20054",
			"--metrics-address=[$(POD_IP)]:20055", "--metrics-tls-cert-file=/etc/mcsd/metrics-tls/tls.crt", "--metrics-tls-private-key-file=/etc/mcsd/metrics-tls/tls.key",
			"--cluster-id=east", "--clusterset-cidrs=10.96.0.0/12", "--ip-families=IPv4", "--vip-block-bits-ipv4=20", "--vip-block-bits-ipv6=80", "--v=4", "--exporter-workers=8"}},
	} {
		c := tc.spec.Containers[0]
		for _, a := range tc.args {
			if !slices.Contains(c.Args, a) {
				t.Errorf("%s: no %s in %q", tc.what, a, c.Args)
			}
		}
		if c.Image != "registry.example.com/mcsd:v1.2.3" || c.ImagePullPolicy != corev1.PullAlways {
			t.Errorf("%s: image %s (%s)", tc.what, c.Image, c.ImagePullPolicy)
		}
		if tc.spec.PriorityClassName != tc.priorityClass {
			t.Errorf("%s: priority class %q, want %q", tc.what, tc.spec.PriorityClassName, tc.priorityClass)
		}
		if len(tc.spec.ImagePullSecrets) != 1 || tc.spec.ImagePullSecrets[0].Name != "regcred" {
			t.Errorf("%s: image pull secrets %v", tc.what, tc.spec.ImagePullSecrets)
		}
		if tc.meta.Labels["team"] == "" || tc.meta.Labels["app.kubernetes.io/component"] == "" || len(tc.meta.Annotations) != 1 {
			t.Errorf("%s: pod labels %v, annotations %v", tc.what, tc.meta.Labels, tc.meta.Annotations)
		}
		if env(c, "POD_IP") == nil {
			t.Errorf("%s: no POD_IP for --metrics-address", tc.what)
		}
		if len(c.VolumeMounts) != 1 || c.VolumeMounts[0].MountPath != "/etc/mcsd/metrics-tls" || len(tc.spec.Volumes) != 1 ||
			tc.spec.Volumes[0].Name != c.VolumeMounts[0].Name || tc.spec.Volumes[0].Secret == nil || tc.spec.Volumes[0].Secret.SecretName != "mcsd-metrics-tls" {
			t.Errorf("%s: mounts %+v of volumes %+v, want metrics.tlsSecret at /etc/mcsd/metrics-tls", tc.what, c.VolumeMounts, tc.spec.Volumes)
		}
	}
	if e := env(agent.Containers[0], "POD_CIDRS"); e == nil || e.Value != "10.244.0.0/16,fd00:10:244::/56" {
		t.Errorf("node agent's POD_CIDRS: %v", e)
	}
	if got := agent.Containers[0].Ports; len(got) != 4 || got[0].ContainerPort != 20053 || got[1].ContainerPort != 20053 || got[2].ContainerPort != 20054 ||
		got[3].Name != "metrics" || got[3].ContainerPort != 20055 {
		t.Errorf("node agent's ports: %v, want dns, dns-tcp, health and metrics", got)
	}
	if got := ctrl.Containers[0].Ports; len(got) != 2 || got[1].Name != "metrics" || got[1].ContainerPort != 20055 {
		t.Errorf("controller's ports: %v, want health and metrics", got)
	}
	if got := agent.Containers[0].Resources.Requests.Memory().String(); got != "128Mi" {
		t.Errorf("node agent's memory request %s", got)
	}
	if got := agent.Containers[0].Resources.Requests.Cpu().String(); got != "200m" {
		t.Errorf("node agent's CPU request %s", got)
	}
	if s := ds.Spec.UpdateStrategy; s.Type != appsv1.RollingUpdateDaemonSetStrategyType || s.RollingUpdate == nil || s.RollingUpdate.MaxUnavailable.String() != "10%" {
		t.Errorf("node agent's update strategy %+v", s)
	}
	if s := deploy.Spec.Strategy; s.Type != appsv1.RecreateDeploymentStrategyType || s.RollingUpdate != nil {
		t.Errorf("controller's update strategy %+v, want Recreate alone", s)
	}
	if ds.Spec.Template.Labels["team"] != "net" || ds.Spec.Template.Annotations["example.com/scrape"] != "true" {
		t.Errorf("node agent's pod labels %v, annotations %v", ds.Spec.Template.Labels, ds.Spec.Template.Annotations)
	}
	if got := ctrl.Containers[0].Resources.Limits.Memory().String(); got != "2Gi" {
		t.Errorf("controller's memory limit %s", got)
	}
	if len(agent.Tolerations) != 1 || agent.Tolerations[0].Key != "dedicated" || agent.NodeSelector["kubernetes.io/os"] != "linux" {
		t.Errorf("node agent's tolerations %v, node selector %v", agent.Tolerations, agent.NodeSelector)
	}
	if len(ctrl.Tolerations) != 1 || ctrl.Tolerations[0].Key != "CriticalAddonsOnly" {
		t.Errorf("controller's tolerations %v", ctrl.Tolerations)
	}
	if _, ok := ctrl.NodeSelector["node-role.kubernetes.io/control-plane"]; !ok {
		t.Errorf("controller's node selector %v", ctrl.NodeSelector)
	}
}

// An IPv6 metrics address is bracketed; without the namespace value Objects
// leaves the namespace to whoever installs (helm install's way).
func TestMetricsBindAddressAndNamespace(t *testing.T) {
	objs, err := charts.Objects("mcsd-system", map[string]any{"metrics": map[string]any{"bindAddress": "::1"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		if o.GetKind() == "Namespace" {
			t.Errorf("a Namespace without namespace.create")
		}
		if o.GetKind() == "DaemonSet" {
			var ds appsv1.DaemonSet
			convert(t, o, &ds)
			if !slices.Contains(ds.Spec.Template.Spec.Containers[0].Args, "--metrics-address=[::1]:10273") {
				t.Errorf("args %q", ds.Spec.Template.Spec.Containers[0].Args)
			}
		}
	}
}

// Values of the wrong shape are refused with the value's name, before
// anything is rendered.
func TestBadValuesAreRefused(t *testing.T) {
	for name, tc := range map[string]struct {
		values map[string]any
		want   string
	}{
		"port out of range":       {map[string]any{"ports": map[string]any{"dns": 70000}}, "ports"},
		"port as text":            {map[string]any{"ports": map[string]any{"health": "http"}}, "health"},
		"unknown IP family":       {map[string]any{"ipFamilies": []any{"IPv5"}}, "ipFamilies"},
		"pod CIDRs as one string": {map[string]any{"podCIDRs": "10.0.0.0/8"}, "podCIDRs"},
		"negative replicas":       {map[string]any{"controller": map[string]any{"replicas": -1}}, "replicas"},
		"unknown pull policy":     {map[string]any{"image": map[string]any{"pullPolicy": "Sometimes"}}, "pullPolicy"},
		"misspelt value":          {map[string]any{"clusterId": "east"}, "clusterId"},
		"cluster ID not a label":  {map[string]any{"clusterID": "East_1"}, "clusterID"},
		"block bits out of range": {map[string]any{"vipBlockBits": map[string]any{"ipv4": 33}}, "ipv4"},
		"digest not a digest":     {map[string]any{"image": map[string]any{"digest": "latest"}}, "digest"},
		"pull secret as a string": {map[string]any{"imagePullSecrets": []any{"regcred"}}, "imagePullSecrets"},
		"Recreate for DaemonSet":  {map[string]any{"nodeAgent": map[string]any{"updateStrategy": map[string]any{"type": "Recreate"}}}, "updateStrategy"},
		"OnDelete for Deployment": {map[string]any{"controller": map[string]any{"updateStrategy": map[string]any{"type": "OnDelete"}}}, "updateStrategy"},
		"pod label not a string":  {map[string]any{"controller": map[string]any{"podLabels": map[string]any{"tier": 1}}}, "podLabels"},
		"pod label the chart's":   {map[string]any{"nodeAgent": map[string]any{"podLabels": map[string]any{"app.kubernetes.io/component": "dns"}}}, "nodeAgent.podLabels: app.kubernetes.io/component is one of the chart's own labels"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := charts.Render("mcsd-system", tc.values)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Render: %v, want an error naming %s", err, tc.want)
			}
			t.Log(err)
		})
	}
	if _, err := charts.Render("", nil); err == nil {
		t.Errorf("Render without a namespace: no error")
	}
}

func convert(t *testing.T, o *unstructured.Unstructured, into any) {
	t.Helper()
	if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(o.Object, into, true); err != nil {
		t.Fatalf("%s %s: %v", o.GetKind(), o.GetName(), err)
	}
}

func env(c corev1.Container, name string) *corev1.EnvVar {
	for i := range c.Env {
		if c.Env[i].Name == name {
			return &c.Env[i]
		}
	}
	return nil
}

// Objects come in the order to apply them: the namespace and the priority
// class before anything that lives in or names them, identities before the
// workloads that run as them.
func TestObjectsComeInApplyOrder(t *testing.T) {
	objs, err := charts.Objects("mcsd-system", map[string]any{"namespace": map[string]any{"create": true}, "priorityClass": map[string]any{"create": true}})
	if err != nil {
		t.Fatal(err)
	}
	first := map[string]int{}
	for i, o := range objs {
		if _, ok := first[o.GetKind()]; !ok {
			first[o.GetKind()] = i
		}
	}
	if objs[0].GetKind() != "Namespace" {
		t.Errorf("the first object is a %s, want the Namespace", objs[0].GetKind())
	}
	for _, pair := range [][2]string{
		{"PriorityClass", "DaemonSet"}, {"ServiceAccount", "DaemonSet"}, {"RoleBinding", "Deployment"},
		{"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}, {"ValidatingAdmissionPolicyBinding", "DaemonSet"},
	} {
		before, okB := first[pair[0]]
		after, okA := first[pair[1]]
		if !okB || !okA || before > after {
			t.Errorf("%s (at %d, %v) does not come before %s (at %d, %v)", pair[0], before, okB, pair[1], after, okA)
		}
	}
}

// A document that gives a key twice is refused, as kubectl apply refuses
// it, rather than decoded with one of the two.
func TestDocumentsRefuseAKeyGivenTwice(t *testing.T) {
	_, err := charts.Documents([]byte("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n  labels:\n    x: \"1\"\n    x: \"2\"\n"))
	if err == nil || !strings.Contains(err.Error(), `key "x" already set`) {
		t.Fatalf("Documents: %v, want the duplicate key refused", err)
	}
	t.Log(err)
}

// /metrics on loopback: no pod declares a port nobody else reaches, and a
// PodMonitor, which could not scrape it, is refused naming the values.
// Plain HTTP is allowed there only.
func TestLoopbackMetricsHaveNoPortNorPodMonitor(t *testing.T) {
	loopback := map[string]any{"bindAddress": "127.0.0.1"}
	objs, err := charts.Objects("mcsd-system", map[string]any{"metrics": loopback})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		containers, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
		for _, c := range containers {
			ports, _, _ := unstructured.NestedSlice(c.(map[string]any), "ports")
			for _, p := range ports {
				if p.(map[string]any)["name"] == "metrics" {
					t.Errorf("%s %s declares a metrics port for a loopback /metrics", o.GetKind(), o.GetName())
				}
			}
		}
	}
	_, err = charts.Objects("mcsd-system", map[string]any{"metrics": loopback, "podMonitor": map[string]any{"enabled": true}})
	if err == nil || !strings.Contains(err.Error(), "podMonitor.enabled") || !strings.Contains(err.Error(), "metrics.bindAddress") {
		t.Errorf("podMonitor.enabled with loopback metrics: %v, want an error naming podMonitor.enabled and metrics.bindAddress", err)
	}

	plain := map[string]any{"bindAddress": "127.0.0.1", "secure": false}
	objs, err = charts.Objects("mcsd-system", map[string]any{"metrics": plain})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		if o.GetKind() == "ClusterRoleBinding" && o.GetName() == "mcsd-auth-delegator" {
			t.Errorf("plain /metrics still binds system:auth-delegator, which only the reviews need")
		}
		if o.GetKind() == "DaemonSet" {
			var ds appsv1.DaemonSet
			convert(t, o, &ds)
			if !slices.Contains(ds.Spec.Template.Spec.Containers[0].Args, "--metrics-secure=false") {
				t.Errorf("metrics.secure false: args %q", ds.Spec.Template.Spec.Containers[0].Args)
			}
		}
	}
	_, err = charts.Objects("mcsd-system", map[string]any{"metrics": map[string]any{"secure": false}})
	if err == nil || !strings.Contains(err.Error(), "metrics.secure: false") {
		t.Errorf("plain /metrics on the pod's address: %v, want an error naming metrics.secure", err)
	}
}

// By default every pod serves /metrics on its metrics port, over HTTPS to
// the tokens the API server reviews: mcsd's identities may have them
// reviewed.
func TestMetricsAreSecureByDefault(t *testing.T) {
	objs, err := charts.Objects("mcsd-system", nil)
	if err != nil {
		t.Fatal(err)
	}
	delegators := 0
	for _, o := range objs {
		switch o.GetKind() {
		case "DaemonSet", "Deployment":
			containers, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
			c := containers[0].(map[string]any)
			args, _, _ := unstructured.NestedStringSlice(c, "args")
			if !slices.Contains(args, "--metrics-address=[$(POD_IP)]:10273") || slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--metrics-secure") }) {
				t.Errorf("%s: args %q, want the secure default on the pod's address", o.GetName(), args)
			}
			ports, _, _ := unstructured.NestedSlice(c, "ports")
			if !slices.ContainsFunc(ports, func(p any) bool { return p.(map[string]any)["name"] == "metrics" }) {
				t.Errorf("%s: ports %v, without metrics", o.GetName(), ports)
			}
		case "ClusterRoleBinding":
			if o.GetName() == "mcsd-auth-delegator" {
				delegators++
			}
		case "ClusterRole":
			if o.GetName() == "mcsd-metrics-reader" {
				t.Errorf("mcsd-metrics-reader without podMonitor.enabled or metrics.readers")
			}
		}
	}
	if delegators != 1 {
		t.Errorf("%d ClusterRoleBindings mcsd-auth-delegator, want 1", delegators)
	}
}
