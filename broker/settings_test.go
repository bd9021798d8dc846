package broker

import (
	"net/netip"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"

	"github.com/mcsd-io/mcsd/manifests"
)

// What `kubectl apply -k manifests/broker` installs equals what Install
// does with default settings before any member joins.
func TestShippedManifestsAreTheDefaults(t *testing.T) {
	defaults := Settings{}.WithDefaults()
	seen := map[string]bool{}
	for _, file := range manifests.BrokerFiles {
		data, err := manifests.Broker.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		objs, err := Decode(data)
		if err != nil {
			t.Fatal(err)
		}
		for _, obj := range objs {
			switch o := obj.(type) {
			case *corev1.ConfigMap:
				seen["settings"] = true
				if !equality.Semantic.DeepEqual(o.Data, defaults.data()) {
					t.Errorf("settings.yaml holds %v, the defaults are %v", o.Data, defaults.data())
				}
				s, err := ParseSettings(o)
				if err != nil || s.WithDefaults() != defaults {
					t.Errorf("settings.yaml parses to %+v, %v", s, err)
				}
			case *corev1.Namespace:
				seen["namespace"] = true
				if o.Name != DefaultNamespace || o.Labels[LabelBroker] != DefaultNamespace {
					t.Errorf("namespace.yaml: %s labelled %v", o.Name, o.Labels)
				}
			case *rbacv1.ClusterRoleBinding:
				seen["reader binding"] = true
				want := []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.GroupKind, Name: "system:serviceaccounts:" + DefaultNamespace}}
				if o.Name != MemberReaderRole+"-"+DefaultNamespace || o.RoleRef.Name != MemberReaderRole || !equality.Semantic.DeepEqual(o.Subjects, want) {
					t.Errorf("member-role.yaml: binding %s of %s to %v, Install makes them for %s", o.Name, o.RoleRef.Name, o.Subjects, DefaultNamespace)
				}
			case *admissionv1.ValidatingAdmissionPolicyBinding:
				seen[o.Name] = true
				if o.Spec.ParamRef == nil || o.Spec.ParamRef.Namespace != DefaultNamespace ||
					!equality.Semantic.DeepEqual(o.Spec.MatchResources.NamespaceSelector.MatchLabels, map[string]string{LabelBroker: DefaultNamespace}) {
					t.Errorf("binding %s does not use the namespace %s", o.Name, DefaultNamespace)
				}
			}
		}
	}
	for _, want := range []string{"settings", "namespace", "reader binding", SourceClusterPolicy, BudgetPolicy, EndpointsPolicy, ExportRulesPolicy} {
		if !seen[want] {
			t.Errorf("no %s in the broker manifests", want)
		}
	}
	if len(seen) != 7 {
		t.Fatalf("found %v in the broker manifests", seen)
	}
}

// The shipped settings fit the default etcd quota with room to spare, and
// settings that would not are refused before anything is installed.
func TestTheShippedSettingsFitTheEtcdQuota(t *testing.T) {
	z := WorstCase(Settings{})
	var out strings.Builder
	if err := z.Print(&out); err != nil {
		t.Fatal(err)
	}
	t.Logf("worst case at the shipped settings:\n%s", out.String())
	if err := z.Fits(); err != nil {
		t.Fatal(err)
	}
	if z.Clusterset > DefaultEtcdQuotaBytes/2 {
		t.Fatalf("clusterset %d, member %d", z.Clusterset, z.Member)
	}
	for name, s := range map[string]Settings{
		"too many members":           {MaxMembers: 100},
		"a budget of 20000 slices":   {MemberBudget: Budget{EndpointSlices: 20000}},
		"a small etcd":               {EtcdQuotaBytes: 1 << 30},
		"1000 endpoints per slice":   {MemberBudget: Budget{EndpointsPerSlice: 1000}},
		"1 MiB of exported metadata": {MemberBudget: Budget{ExportedMetadataBytes: 1 << 20}},
	} {
		err := WorstCase(s).Fits()
		if err == nil {
			t.Errorf("%s: fits", name)
			continue
		}
		if _, err := Objects(s); err != nil {
			t.Errorf("%s: Objects: %v", name, err)
		}
		t.Logf("%s: %v", name, err)
	}
	// More members fit when each may store less.
	if err := WorstCase(Settings{MaxMembers: 50, MemberBudget: Budget{ServiceImports: 400, EndpointSlices: 600}}).Fits(); err != nil {
		t.Fatal(err)
	}
}

func TestSettingsAreValidated(t *testing.T) {
	for name, s := range map[string]Settings{
		"a v6 range for v4":                          {ClusterSetCIDRv4: netip.MustParsePrefix("fd00::/48")},
		"blocks wider than the range":                {ClusterSetCIDRv4: netip.MustParsePrefix("10.0.0.0/16"), BlockBitsV4: 8},
		"blocks past 32 bits":                        {BlockBitsV4: 33},
		"a negative budget":                          {MemberBudget: Budget{ServiceImports: -1}},
		"fewer endpoints than mcsd writes per slice": {MemberBudget: Budget{EndpointsPerSlice: 50}},
		"no room for mcsd's labels":                  {MemberBudget: Budget{LabelBytes: 100}},
		"no members":                                 {MaxMembers: -1},
	} {
		if err := s.WithDefaults().validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if err := (Settings{}).WithDefaults().validate(); err != nil {
		t.Fatal(err)
	}
}
