package broker

import (
	"net/netip"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
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
			case *corev1.ResourceQuota:
				seen["quota"] = true
				if want := quotaHard(DefaultMemberBudget, 0); !equality.Semantic.DeepEqual(o.Spec.Hard, want) {
					t.Errorf("quota.yaml holds %v, Install makes %v", o.Spec.Hard, want)
				}
			case *admissionv1.ValidatingAdmissionPolicyBinding:
				seen[o.Name] = true
				if o.Spec.ParamRef == nil || o.Spec.ParamRef.Namespace != DefaultNamespace ||
					o.Spec.MatchResources.NamespaceSelector.MatchLabels[corev1.LabelMetadataName] != DefaultNamespace {
					t.Errorf("binding %s does not use the namespace %s", o.Name, DefaultNamespace)
				}
			}
		}
	}
	if !seen[SourceClusterPolicy] || !seen[EndpointsPolicy] || len(seen) != 4 {
		t.Fatalf("found %v in the broker manifests", seen)
	}
}

func TestSettingsAreValidated(t *testing.T) {
	for name, s := range map[string]Settings{
		"a v6 range for v4":           {ClusterSetCIDRv4: netip.MustParsePrefix("fd00::/48")},
		"blocks wider than the range": {ClusterSetCIDRv4: netip.MustParsePrefix("10.0.0.0/16"), BlockBitsV4: 8},
		"blocks past 32 bits":         {BlockBitsV4: 33},
		"a negative budget":           {MemberBudget: Budget{ServiceImports: -1}},
	} {
		if err := s.WithDefaults().validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if err := (Settings{}).WithDefaults().validate(); err != nil {
		t.Fatal(err)
	}
}
