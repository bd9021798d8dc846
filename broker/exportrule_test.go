package broker

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestExportRulesAllowOnlyTheMembersOfEveryRuleCoveringANamespace(t *testing.T) {
	cm := func(name, namespaces, members string) *corev1.ConfigMap {
		return &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: ExportRuleName(name), Labels: map[string]string{LabelExportRule: ""}},
			Data:       map[string]string{ExportRuleNamespacesKey: namespaces, ExportRuleMembersKey: members},
		}
	}
	rules := ParseExportRules([]*corev1.ConfigMap{
		cm("shop", " shop , team-* ", "east, west"),
		cm("team", "team-a", "east"),
		cm("closed", "vault", ""),
		{ObjectMeta: metav1.ObjectMeta{Name: "not-a-rule"}, Data: map[string]string{ExportRuleNamespacesKey: "*"}},
	})
	if len(rules) != 3 || rules[0].Name != "closed" {
		t.Fatalf("rules %+v", rules)
	}
	for _, tc := range []struct {
		namespace, cluster string
		allowed            bool
	}{
		{"shop", "east", true},
		{"shop", "north", false},
		{"team-b", "west", true},
		{"team-a", "west", false}, // "team" covers it too, and lists only east
		{"team-a", "east", true},
		{"teams", "north", true}, // a prefix is a prefix of the name, dash included
		{"vault", "east", false},
		{"other", "north", true},
	} {
		if got, _ := rules.Allows(tc.namespace, tc.cluster); got != tc.allowed {
			t.Errorf("%s exporting %s: allowed %v, want %v", tc.cluster, tc.namespace, got, tc.allowed)
		}
	}
	if _, rule := rules.Allows("team-a", "west"); rule == nil || rule.Name != "team" {
		t.Errorf("the rule keeping west out of team-a: %+v", rule)
	}
}

func TestExportRulesAreValidated(t *testing.T) {
	for name, r := range map[string]ExportRule{
		"no namespaces":        NewExportRule("r", "", "east"),
		"a star inside":        NewExportRule("r", "te*am", "east"),
		"not a namespace name": NewExportRule("r", "Shop", "east"),
		"a bad member":         NewExportRule("r", "shop", "East_1"),
		"a bad name":           NewExportRule("R.1", "shop", "east"),
	} {
		if err := r.Validate(); err == nil {
			t.Errorf("%s: accepted %+v", name, r)
		}
	}
	for _, r := range []ExportRule{NewExportRule("r", "*", ""), NewExportRule("r", "team-*,shop", "east,west")} {
		if err := r.Validate(); err != nil {
			t.Errorf("%+v: %v", r, err)
		}
	}
}
