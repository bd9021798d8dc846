package main

import (
	"bytes"
	"maps"
	"net/netip"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/mcsd-io/mcsd/broker"
	"github.com/mcsd-io/mcsd/manifests"
)

// broker install --print writes what broker.Install applies: the settings
// ConfigMap reads back as the settings given, and every object is in the
// broker namespace asked for.
func TestBrokerInstallPrintsTheManifestsWithTheSettings(t *testing.T) {
	var out, errOut bytes.Buffer
	root := newRoot(genericiooptions.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut})
	root.SetArgs([]string{"broker", "install", "--print", "--skip-crds", "--broker-namespace", "mcs",
		"--clusterset-cidrs", "10.250.0.0/16,fd00:250::/48", "--block-bits-ipv4", "24",
		"--max-members", "40", "--etcd-quota", "4Gi", "--member-budget", "memberServiceImports=10,memberEndpointSlices=40,portsPerRecord=8"})
	if err := root.Execute(); err != nil {
		t.Fatalf("%v\n%s", err, errOut.String())
	}
	objs, err := broker.Decode(out.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	want := broker.Settings{
		Namespace:        "mcs",
		ClusterSetCIDRv4: netip.MustParsePrefix("10.250.0.0/16"), ClusterSetCIDRv6: netip.MustParsePrefix("fd00:250::/48"),
		BlockBitsV4: 24, BlockBitsV6: 64, MaxMembers: 40, EtcdQuotaBytes: 4 << 30,
		MemberBudget: broker.Budget{ServiceImports: 10, EndpointSlices: 40, PortsPerRecord: 8},
	}.WithDefaults()
	kinds := map[string]int{}
	for _, obj := range objs {
		switch o := obj.(type) {
		case *corev1.Namespace:
			kinds["Namespace"]++
			if o.Name != "mcs" {
				t.Errorf("namespace %s", o.Name)
			}
		case *corev1.ConfigMap:
			kinds["ConfigMap"]++
			got, err := broker.ParseSettings(o)
			if err != nil || got != want {
				t.Errorf("printed settings read back as %+v (%v), want %+v", got, err, want)
			}
		case *rbacv1.ClusterRoleBinding:
			kinds["ClusterRoleBinding"]++
			if o.Subjects[0].Name != "system:serviceaccounts:mcs" {
				t.Errorf("reader binding %s for %v", o.Name, o.Subjects)
			}
		case *admissionv1.ValidatingAdmissionPolicyBinding:
			kinds["Binding"]++
			if o.Spec.MatchResources.NamespaceSelector.MatchLabels[broker.LabelBroker] != "mcs" ||
				(o.Spec.ParamRef != nil && o.Spec.ParamRef.Namespace != "mcs") {
				t.Errorf("binding %s does not select namespace mcs: %+v", o.Name, o.Spec)
			}
		}
	}
	if kinds["Namespace"] != 1 || kinds["ConfigMap"] != 1 || kinds["ClusterRoleBinding"] != 1 || kinds["Binding"] != 4 {
		t.Errorf("printed %v", kinds)
	}
	if !strings.Contains(errOut.String(), "40 members") || !strings.Contains(errOut.String(), "fits") {
		t.Errorf("the worst case is not printed:\n%s", errOut.String())
	}
}

// Settings whose worst case does not fit the etcd quota are refused before
// anything is printed or installed.
func TestBrokerInstallRefusesSettingsThatDoNotFit(t *testing.T) {
	var out, errOut bytes.Buffer
	root := newRoot(genericiooptions.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut})
	root.SetArgs([]string{"broker", "install", "--print", "--max-members", "100"})
	err := root.Execute()
	if err == nil || !strings.Contains(err.Error(), "100 members") || out.Len() > 0 {
		t.Fatalf("err %v, printed %d bytes", err, out.Len())
	}
	if !strings.Contains(errOut.String(), "does NOT fit") {
		t.Errorf("the worst case is not printed:\n%s", errOut.String())
	}
	root.SetArgs([]string{"broker", "install", "--print", "--member-budget", "records=1"})
	if err := root.Execute(); err == nil || !strings.Contains(err.Error(), "unknown member budget") {
		t.Fatalf("an unknown budget: %v", err)
	}
}

// Without flags, --print writes the settings the shipped manifests hold,
// which are broker's defaults.
func TestBrokerInstallPrintsTheShippedDefaults(t *testing.T) {
	var out bytes.Buffer
	if err := printBroker(&out, broker.Settings{}.WithDefaults(), false); err != nil {
		t.Fatal(err)
	}
	printed, err := broker.Decode(out.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	data, err := manifests.Broker.ReadFile("broker/settings.yaml")
	if err != nil {
		t.Fatal(err)
	}
	shipped, err := broker.Decode(data)
	if err != nil {
		t.Fatal(err)
	}
	want := shipped[0].(*corev1.ConfigMap).Data
	for _, obj := range printed {
		if cm, ok := obj.(*corev1.ConfigMap); ok && !maps.Equal(cm.Data, want) {
			t.Errorf("printed default settings %v, shipped %v", cm.Data, want)
		}
	}
}
