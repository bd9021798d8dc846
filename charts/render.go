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

// Render renders the chart's templates into namespace with values over the
// chart's defaults (as helm install -n namespace -f values): the text of
// each template that renders to something, by its file name
// (node-agent.yaml), comments kept.
func Render(namespace string, values map[string]any) (map[string]string, error) {
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
	// Strict: a template that names a value the chart does not define
	// fails instead of rendering empty.
	rendered, err := engine.Engine{Strict: true}.Render(c, top)
	if err != nil {
		return nil, fmt.Errorf("rendering the mcsd chart: %w", err)
	}
	out := map[string]string{}
	for name, text := range rendered {
		base := path.Base(name)
		if strings.HasPrefix(base, "_") || strings.TrimSpace(text) == "" {
			continue
		}
		out[base] = text
	}
	return out, nil
}

// Objects renders the chart (as Render) into the objects to apply, in the
// order to apply them: the namespace and cluster-wide classes first, then
// identities and policies, then the workloads.
func Objects(namespace string, values map[string]any) ([]*unstructured.Unstructured, error) {
	rendered, err := Render(namespace, values)
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(rendered))
	for name := range rendered {
		names = append(names, name)
	}
	sort.Strings(names)
	var objs []*unstructured.Unstructured
	for _, name := range names {
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
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
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
