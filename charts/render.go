// Package charts embeds mcsd's Helm chart (charts/mcsd) and renders it with
// Helm's own engine, so that manifests/mcsd (make manifests) and tools that
// install mcsd for a member produce exactly what helm install would. It
// renders only: applying the objects is the caller's job.
package charts

import (
	"embed"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"sort"
	"strconv"
	"strings"

	"helm.sh/helm/v4/pkg/chart/common"
	chartutil "helm.sh/helm/v4/pkg/chart/common/util"
	"helm.sh/helm/v4/pkg/chart/loader/archive"
	chart "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/engine"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// ReleaseName is the release name rendering uses; the chart names its
// objects without it (one mcsd per cluster).
const ReleaseName = "mcsd"

//go:embed all:mcsd
var files embed.FS

// Load returns the embedded chart.
func Load() (*chart.Chart, error) {
	var buffered []*archive.BufferedFile
	err := fs.WalkDir(files, "mcsd", func(name string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := files.ReadFile(name)
		if err != nil {
			return err
		}
		buffered = append(buffered, &archive.BufferedFile{Name: strings.TrimPrefix(name, "mcsd/"), Data: data})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reading the embedded chart: %w", err)
	}
	c, err := loader.LoadFiles(buffered)
	if err != nil {
		return nil, fmt.Errorf("loading the embedded chart: %w", err)
	}
	return c, nil
}

// Renderer renders the chart for a tool that applies the objects itself.
// Its zero value renders as helm install does.
type Renderer struct {
	// ManagedBy is the label app.kubernetes.io/managed-by of every object
	// (the templates' .Release.Service): the tool that applies them. Empty
	// means Helm.
	ManagedBy string
}

// Render renders the chart's templates into namespace with values over the
// chart's defaults (as helm install -n namespace -f values): the text of
// each template that renders to something, by its file name
// (node-agent.yaml), comments kept. As with helm install, neither the
// notes (NOTES.txt) nor the hooks (the helm test's objects) are among
// them: see Notes and TestHooks.
func Render(namespace string, values map[string]any) (map[string]string, error) {
	return Renderer{}.Render(namespace, values)
}

// Render is Render, the objects labelled as managed by r.ManagedBy.
func (r Renderer) Render(namespace string, values map[string]any) (map[string]string, error) {
	rendered, err := r.render(namespace, values)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for name, text := range rendered {
		base := path.Base(name)
		if base == notesFile {
			continue
		}
		hooks, err := hookFile(name, text)
		if err != nil {
			return nil, err
		}
		if !hooks {
			out[base] = text
		}
	}
	return out, nil
}

// Notes is what helm install prints after installing the chart with
// values into namespace (templates/NOTES.txt): what was installed, the next
// step and how to check it.
func Notes(namespace string, values map[string]any) (string, error) {
	rendered, err := Renderer{}.render(namespace, values)
	if err != nil {
		return "", err
	}
	for name, text := range rendered {
		if path.Base(name) == notesFile {
			return text, nil
		}
	}
	return "", fmt.Errorf("the mcsd chart has no %s", notesFile)
}

// TestHooks are the objects helm test creates for the chart installed with
// values into namespace, in the order it creates them (by hook weight,
// then as Objects orders kinds): the test's identity, then its pod.
func TestHooks(namespace string, values map[string]any) ([]*unstructured.Unstructured, error) {
	rendered, err := Renderer{}.render(namespace, values)
	if err != nil {
		return nil, err
	}
	var hooks []*unstructured.Unstructured
	for _, name := range sortedKeys(rendered) {
		if path.Base(name) == notesFile {
			continue
		}
		docs, err := Documents([]byte(rendered[name]))
		if err != nil {
			return nil, fmt.Errorf("the mcsd chart's %s: %w", name, err)
		}
		for _, d := range docs {
			if slices.Contains(strings.Split(d.GetAnnotations()[hookAnnotation], ","), "test") {
				hooks = append(hooks, d)
			}
		}
	}
	slices.SortStableFunc(hooks, func(a, b *unstructured.Unstructured) int {
		if c := hookWeight(a) - hookWeight(b); c != 0 {
			return c
		}
		return applyRank(a.GetKind()) - applyRank(b.GetKind())
	})
	return hooks, nil
}

const (
	notesFile      = "NOTES.txt"
	hookAnnotation = "helm.sh/hook"
)

// render runs Helm's engine on the chart: every template's text by its
// path in the chart, partials and templates that render to nothing left
// out.
func (r Renderer) render(namespace string, values map[string]any) (map[string]string, error) {
	c, err := Load()
	if err != nil {
		return nil, err
	}
	if namespace == "" {
		return nil, fmt.Errorf("rendering the mcsd chart: no namespace given")
	}
	top, err := chartutil.ToRenderValues(c, values, common.ReleaseOptions{Name: ReleaseName, Namespace: namespace, IsInstall: true}, nil)
	if err != nil {
		return nil, fmt.Errorf("the mcsd chart's values: %w", err)
	}
	if r.ManagedBy != "" {
		top["Release"].(map[string]any)["Service"] = r.ManagedBy
	}
	// Strict: a template that names a value the chart does not define
	// fails instead of rendering empty.
	rendered, err := engine.Engine{Strict: true}.Render(c, top)
	if err != nil {
		return nil, fmt.Errorf("rendering the mcsd chart: %w", err)
	}
	out := map[string]string{}
	for name, text := range rendered {
		if strings.HasPrefix(path.Base(name), "_") || strings.TrimSpace(text) == "" {
			continue
		}
		out[name] = text
	}
	return out, nil
}

// hookFile says whether the template name rendered only hooks, which Helm
// runs at their events instead of installing them with the release. A
// template mixing hooks and objects is refused: the chart keeps its hooks
// in files of their own (templates/tests).
func hookFile(name, text string) (bool, error) {
	docs, err := Documents([]byte(text))
	if err != nil {
		return false, fmt.Errorf("the mcsd chart's %s: %w", name, err)
	}
	hooks := 0
	for _, d := range docs {
		if _, ok := d.GetAnnotations()[hookAnnotation]; ok {
			hooks++
		}
	}
	if hooks > 0 && hooks < len(docs) {
		return false, fmt.Errorf("the mcsd chart's %s mixes hooks and objects", name)
	}
	return hooks > 0, nil
}

// hookWeight is a hook's helm.sh/hook-weight, 0 when it has none.
func hookWeight(o *unstructured.Unstructured) int {
	w, _ := strconv.Atoi(o.GetAnnotations()["helm.sh/hook-weight"])
	return w
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// Objects renders the chart (as Render) into the objects to apply, in the
// order to apply them: the namespace and cluster-wide classes first, then
// identities and policies, then the workloads.
func Objects(namespace string, values map[string]any) ([]*unstructured.Unstructured, error) {
	return Renderer{}.Objects(namespace, values)
}

// Objects is Objects, the objects labelled as managed by r.ManagedBy.
func (r Renderer) Objects(namespace string, values map[string]any) ([]*unstructured.Unstructured, error) {
	rendered, err := r.Render(namespace, values)
	if err != nil {
		return nil, err
	}
	var objs []*unstructured.Unstructured
	for _, name := range sortedKeys(rendered) {
		docs, err := Documents([]byte(rendered[name]))
		if err != nil {
			return nil, fmt.Errorf("the mcsd chart's %s: %w", name, err)
		}
		objs = append(objs, docs...)
	}
	slices.SortStableFunc(objs, func(a, b *unstructured.Unstructured) int {
		return applyRank(a.GetKind()) - applyRank(b.GetKind())
	})
	return objs, nil
}

// applyOrder is Helm's install order for the kinds the chart has: what an
// object refers to is applied before it.
var applyOrder = []string{
	"Namespace", "PriorityClass", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding",
	"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding", "Service", "DaemonSet", "Deployment", "PodDisruptionBudget",
}

func applyRank(kind string) int {
	if i := slices.Index(applyOrder, kind); i >= 0 {
		return i
	}
	return len(applyOrder)
}

// Documents decodes the objects of a multi-document YAML text, skipping
// documents that hold only comments.
func Documents(text []byte) ([]*unstructured.Unstructured, error) {
	var objs []*unstructured.Unstructured
	for i, doc := range splitDocuments(string(text)) {
		var obj map[string]any
		// Strict: a key given twice is an error, as kubectl apply makes it.
		if err := yaml.UnmarshalStrict([]byte(doc), &obj); err != nil {
			return nil, fmt.Errorf("document %d: %w", i+1, err)
		}
		if len(obj) == 0 {
			continue
		}
		objs = append(objs, &unstructured.Unstructured{Object: obj})
	}
	return objs, nil
}

// splitDocuments splits YAML text at its document separators.
func splitDocuments(text string) []string {
	var docs []string
	var cur strings.Builder
	for line := range strings.SplitAfterSeq(text, "\n") {
		if strings.TrimRight(line, "\n") == "---" {
			docs = append(docs, cur.String())
			cur.Reset()
			continue
		}
		cur.WriteString(line)
	}
	return append(docs, cur.String())
}
