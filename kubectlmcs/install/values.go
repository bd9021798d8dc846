package install

import (
	"bytes"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strings"

	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/strvals"
	corev1 "k8s.io/api/core/v1"
)

// ParseValues reads the operator's values of the chart as helm install
// does: the files of --values (-f) merged in order, then each --set
// (key=value,key2={a,b}) over them.
func ParseValues(files, sets []string) (map[string]any, error) {
	values := map[string]any{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("--values: %w", err)
		}
		more, err := loader.LoadValues(bytes.NewReader(data))
		if err != nil {
			return nil, fmt.Errorf("--values %s: %w", f, err)
		}
		values = loader.MergeMaps(values, more)
	}
	for _, s := range sets {
		if err := strvals.ParseInto(s, values); err != nil {
			return nil, fmt.Errorf("--set %s: %w", s, err)
		}
	}
	return values, nil
}

// MemberValues are the chart's values for the member of s: the operator's
// values with the member's settings over them. A value the operator set
// that join also sets must agree with join's, and the error names the flag
// that sets it: a cluster ID or ranges the broker does not know would
// break the member.
func MemberValues(s Settings) (map[string]any, error) {
	if s.ClusterID == "" || len(s.IPFamilies) == 0 {
		return nil, fmt.Errorf("rendering the mcsd chart: a cluster ID and the IP families are needed (got %q, %v)", s.ClusterID, s.IPFamilies)
	}
	values := deepCopy(s.Values)
	families := make([]any, len(s.IPFamilies))
	for i, f := range s.IPFamilies {
		families[i] = string(f)
	}
	var served []any
	for _, p := range s.ClusterSetCIDRs {
		if slices.Contains(s.IPFamilies, familyOf(p)) {
			served = append(served, p.String())
		}
	}
	owned := []ownedValue{
		{[]string{"clusterID"}, s.ClusterID, "--cluster-id"},
		{[]string{"podCIDRs"}, prefixValues(s.PodCIDRs), "--pod-cidrs"},
		{[]string{"ipFamilies"}, families, "the member's ServiceCIDR (leave ipFamilies out)"},
		{[]string{"clustersetCIDRs"}, served, "the broker's settings (kubectl mcs broker install --clusterset-cidrs)"},
		// kubectl apply, unlike helm install, needs the namespace among
		// the objects.
		{[]string{"namespace", "create"}, true, "join itself (leave namespace.create out)"},
		// The Secret join writes.
		{[]string{"controller", "brokerSecret"}, brokerSecretName, "join itself (leave controller.brokerSecret out)"},
	}
	for _, o := range owned {
		if err := o.set(values); err != nil {
			return nil, err
		}
	}
	if s.Image != "" {
		repository, tag := SplitImage(s.Image)
		if given := ImageOf(s.Values); given != "" && given != s.Image {
			return nil, fmt.Errorf("--image %s and the values' image %s disagree: give one", s.Image, given)
		}
		setPath(values, repository, "image", "repository")
		setPath(values, tag, "image", "tag")
	}
	return values, nil
}

// brokerSecretName is the Secret join writes in mcsd's namespace, which
// the controller's --broker-secret names (membership.SecretName; package
// membership depends on this one's neighbours, not the other way).
const brokerSecretName = "mcsd-broker"

// ownedValue is a value join sets for the member.
type ownedValue struct {
	path []string
	want any
	// flag says what sets it instead of a value.
	flag string
}

// set sets the value, refusing one the operator set otherwise.
func (o ownedValue) set(values map[string]any) error {
	if given, ok := lookup(values, o.path...); ok && !unset(given) && fmt.Sprint(given) != fmt.Sprint(o.want) {
		return fmt.Errorf("the value %s=%v disagrees with the member's %v, which join sets from %s", strings.Join(o.path, "."), given, o.want, o.flag)
	}
	setPath(values, o.want, o.path...)
	return nil
}

// ImageOf is the image reference the operator's values name
// (image.repository, image.tag), "" when they name none.
func ImageOf(values map[string]any) string {
	repository, _ := lookup(values, "image", "repository")
	tag, _ := lookup(values, "image", "tag")
	if repository == nil && tag == nil {
		return ""
	}
	r, _ := repository.(string)
	if r == "" {
		r = ShippedImage
	}
	t, _ := tag.(string)
	if t == "" {
		return r
	}
	return r + ":" + t
}

// unset says whether a value says nothing: the chart's defaults of what
// join sets are empty.
func unset(v any) bool {
	switch v := v.(type) {
	case nil:
		return true
	case string:
		return v == ""
	case []any:
		return len(v) == 0
	}
	return false
}

func lookup(values map[string]any, path ...string) (any, bool) {
	var cur any = values
	for _, p := range path {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		if cur, ok = m[p]; !ok {
			return nil, false
		}
	}
	return cur, true
}

func setPath(values map[string]any, v any, path ...string) {
	m := values
	for _, p := range path[:len(path)-1] {
		next, ok := m[p].(map[string]any)
		if !ok {
			next = map[string]any{}
			m[p] = next
		}
		m = next
	}
	m[path[len(path)-1]] = v
}

// deepCopy copies the maps of values, so that setting the member's values
// leaves the operator's as they were.
func deepCopy(values map[string]any) map[string]any {
	out := make(map[string]any, len(values))
	for k, v := range values {
		if m, ok := v.(map[string]any); ok {
			v = deepCopy(m)
		}
		out[k] = v
	}
	return out
}

func prefixValues(ps []netip.Prefix) []any {
	out := make([]any, len(ps))
	for i, p := range ps {
		out[i] = p.String()
	}
	return out
}

func familyOf(p netip.Prefix) corev1.IPFamily {
	if p.Addr().Is4() {
		return corev1.IPv4Protocol
	}
	return corev1.IPv6Protocol
}
