package broker

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/mcsd-io/mcsd/clusterid"
	"github.com/mcsd-io/mcsd/internal/record"
)

// Who may export a namespace. Without export rules, any member may export
// any namespace (the KEP's namespace sameness). An export rule, a ConfigMap
// of the broker namespace that the broker's administrator writes, names
// namespaces (names, or prefixes ending in "*") and the members that may
// export them; a member may export a namespace only when every rule that
// covers it lists the member. The admission policy mcsd-broker-export-rules
// refuses other members' records and EndpointSlices, and exporters and
// importers leave out the records of other members that were written
// before a rule existed.
const (
	// LabelExportRule marks a ConfigMap of the broker namespace as an
	// export rule.
	LabelExportRule = record.LabelExportRule
	// ExportRuleNamespacesKey and ExportRuleMembersKey hold the rule's
	// namespaces and members, comma-separated.
	ExportRuleNamespacesKey = "namespaces"
	ExportRuleMembersKey    = "members"
)

// ExportRuleName is the name of the ConfigMap of the export rule name.
func ExportRuleName(name string) string { return "mcsd-export-rule-" + name }

// ExportRule says which members may export which namespaces.
type ExportRule struct {
	// Name is the rule's own name (its ConfigMap is ExportRuleName(Name)).
	Name string `json:"name"`
	// Namespaces are namespace names, or prefixes ending in "*".
	Namespaces []string `json:"namespaces"`
	// Members are the cluster IDs that may export them.
	Members []string `json:"members"`
}

// NewExportRule is the rule name of namespaces and members, each a
// comma-separated list, as the rule's ConfigMap holds them.
func NewExportRule(name, namespaces, members string) ExportRule {
	return ExportRule{Name: name, Namespaces: splitList(namespaces), Members: splitList(members)}
}

// Covers reports whether the rule speaks of namespace.
func (r ExportRule) Covers(namespace string) bool {
	for _, p := range r.Namespaces {
		if prefix, ok := strings.CutSuffix(p, "*"); ok {
			if strings.HasPrefix(namespace, prefix) {
				return true
			}
		} else if namespace == p {
			return true
		}
	}
	return false
}

// Validate says what is wrong with the rule, if anything.
func (r ExportRule) Validate() error {
	if errs := validation.IsDNS1123Label(r.Name); len(errs) > 0 || len(ExportRuleName(r.Name)) > validation.DNS1123SubdomainMaxLength {
		return fmt.Errorf("export rule %q: the name must be an RFC 1123 label: %s", r.Name, strings.Join(errs, "; "))
	}
	if len(r.Namespaces) == 0 {
		return fmt.Errorf("export rule %s: no namespaces", r.Name)
	}
	for _, p := range r.Namespaces {
		if !validPattern(p) {
			return fmt.Errorf("export rule %s: %q is neither a namespace nor a prefix of one ending in *", r.Name, p)
		}
	}
	for _, m := range r.Members {
		if err := clusterid.Validate(m); err != nil {
			return fmt.Errorf("export rule %s: member %q: %w", r.Name, m, err)
		}
	}
	return nil
}

// validPattern: a namespace name, or a prefix of one followed by "*".
func validPattern(p string) bool {
	prefix, wild := strings.CutSuffix(p, "*")
	if !wild {
		return len(validation.IsDNS1123Label(p)) == 0
	}
	// Completed with a letter, a valid prefix is the start of a name.
	return prefix == "" || len(validation.IsDNS1123Label(prefix+"x")) == 0
}

// ExportRules are every export rule of a broker.
type ExportRules []ExportRule

// Allows reports whether cluster may export services of namespace, and
// else the first rule that keeps it out.
func (rs ExportRules) Allows(namespace, cluster string) (bool, *ExportRule) {
	for i := range rs {
		if rs[i].Covers(namespace) && !slices.Contains(rs[i].Members, cluster) {
			return false, &rs[i]
		}
	}
	return true, nil
}

// ParseExportRules reads the export rules among cms (ConfigMaps labelled
// LabelExportRule) exactly as the admission policy reads them: a rule's
// lists split at commas and trimmed, a pattern ending in "*" a prefix,
// nothing checked, so that readers and the broker always agree on who may
// export what.
func ParseExportRules(cms []*corev1.ConfigMap) ExportRules {
	var rules ExportRules
	for _, cm := range cms {
		if _, ok := cm.Labels[LabelExportRule]; !ok {
			continue
		}
		rules = append(rules, NewExportRule(strings.TrimPrefix(cm.Name, ExportRuleName("")), cm.Data[ExportRuleNamespacesKey], cm.Data[ExportRuleMembersKey]))
	}
	slices.SortFunc(rules, func(a, b ExportRule) int { return strings.Compare(a.Name, b.Name) })
	return rules
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// exportRuleObject is the ConfigMap of r in namespace.
func exportRuleObject(namespace string, r ExportRule) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{
			Name: ExportRuleName(r.Name), Namespace: namespace,
			Labels: map[string]string{LabelExportRule: "", "app.kubernetes.io/name": "mcsd"},
		},
		Data: map[string]string{
			ExportRuleNamespacesKey: strings.Join(r.Namespaces, ","),
			ExportRuleMembersKey:    strings.Join(r.Members, ","),
		},
	}
}

// ListExportRules reads the broker's export rules.
func ListExportRules(ctx context.Context, kube kubernetes.Interface, namespace string) (ExportRules, error) {
	list, err := kube.CoreV1().ConfigMaps(namespace).List(ctx, metav1.ListOptions{LabelSelector: LabelExportRule})
	if err != nil {
		return nil, fmt.Errorf("listing the export rules of broker namespace %s: %w", namespace, err)
	}
	cms := make([]*corev1.ConfigMap, len(list.Items))
	for i := range list.Items {
		cms[i] = &list.Items[i]
	}
	return ParseExportRules(cms), nil
}

// SetExportRule creates or replaces the export rule r, with config an
// administrator's configuration of the broker. It returns once the API
// server enforces it: a dry-run export, as a member the rule keeps out, of
// a namespace it covers is refused (when some member is kept out).
func SetExportRule(ctx context.Context, config *rest.Config, namespace string, r ExportRule) error {
	if err := r.Validate(); err != nil {
		return err
	}
	kube, err := kubernetes.NewForConfig(config)
	if err != nil {
		return err
	}
	want := exportRuleObject(namespace, r)
	if err := upsert(ctx, kube.CoreV1().ConfigMaps(namespace), want, setData); err != nil {
		return fmt.Errorf("writing export rule %s: %w", r.Name, err)
	}
	members, err := Members(ctx, kube, namespace)
	if err != nil {
		return err
	}
	var outside string
	for _, m := range members {
		if !slices.Contains(r.Members, m) {
			outside = m
			break
		}
	}
	if outside == "" {
		return nil
	}
	// A namespace the rule covers: its first name, or a prefix completed.
	exportNS := r.Namespaces[0]
	if prefix, ok := strings.CutSuffix(exportNS, "*"); ok {
		exportNS = prefix + "x"
	}
	member, err := kubernetes.NewForConfig(impersonate(config, namespace, outside))
	if err != nil {
		return err
	}
	own := record.MemberNamespace(namespace, outside)
	return waitRefused(ctx, namespace, []probe{{
		policy: ExportRulesPolicy,
		want:   "export rule " + want.Name,
		write: func(ctx context.Context) error {
			// An empty slice of a covered namespace, as outside writes it.
			_, err := member.DiscoveryV1().EndpointSlices(own).Create(ctx, &discoveryv1.EndpointSlice{
				ObjectMeta: metav1.ObjectMeta{
					Name:   record.EndpointSliceName(outside, exportNS, "probe", discoveryv1.AddressTypeIPv4, 0),
					Labels: record.EndpointSliceLabels(outside, exportNS, "probe"),
				},
				AddressType: discoveryv1.AddressTypeIPv4,
			}, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			return err
		},
	}})
}

// DeleteExportRule deletes the export rule name.
func DeleteExportRule(ctx context.Context, kube kubernetes.Interface, namespace, name string) error {
	err := kube.CoreV1().ConfigMaps(namespace).Delete(ctx, ExportRuleName(name), metav1.DeleteOptions{})
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("no export rule %s in broker namespace %s", name, namespace)
	}
	if err != nil {
		return fmt.Errorf("deleting export rule %s: %w", name, err)
	}
	return nil
}
