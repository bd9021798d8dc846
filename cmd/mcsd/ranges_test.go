package main

import (
	"net/netip"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kuberecord "k8s.io/client-go/tools/record"

	"github.com/mcsd-io/mcsd/broker"
)

// brokerSettings are a broker's settings with ranges other than the
// defaults.
func brokerSettings() broker.Settings {
	return broker.Settings{
		ClusterSetCIDRv4: netip.MustParsePrefix("10.250.0.0/16"),
		ClusterSetCIDRv6: netip.MustParsePrefix("fd00:250::/48"),
		BlockBitsV4:      22,
	}.WithDefaults()
}

func TestRangesComeFromTheBroker(t *testing.T) {
	s := brokerSettings()
	controllersOnly := []string{"--components=exporter,importer", "--broker-kubeconfig=/dev/null"}
	for _, tc := range []struct {
		name string
		args []string
		// want is the ranges the controllers run with, or errs the
		// strings the error must have.
		want string
		errs []string
	}{
		{name: "no flag takes the broker's ranges and blocks", args: controllersOnly,
			want: "clusterSetCIDRv4=10.250.0.0/16 blockBitsV4=22 clusterSetCIDRv6=fd00:250::/48 blockBitsV6=64"},
		{name: "flags that repeat the broker's are accepted", args: append(controllersOnly, "--clusterset-cidrs=10.250.0.0/16,fd00:250::/48", "--vip-block-bits-ipv4=22"),
			want: "clusterSetCIDRv4=10.250.0.0/16 blockBitsV4=22 clusterSetCIDRv6=fd00:250::/48 blockBitsV6=64"},
		{name: "a member may serve one family of the broker's", args: append(controllersOnly, "--clusterset-cidrs=10.250.0.0/16"),
			want: "clusterSetCIDRv4=10.250.0.0/16 blockBitsV4=22"},
		{name: "a range that differs names the flag, its value, the broker's and the settings", args: append(controllersOnly, "--clusterset-cidrs=10.251.0.0/16"),
			errs: []string{"--clusterset-cidrs: 10.251.0.0/16 disagrees", "clusterSetCIDRv4=10.250.0.0/16", "mcsd-broker/mcsd-broker-settings"}},
		{name: "a block size that differs names the flag, its value and the broker's", args: append(controllersOnly, "--vip-block-bits-ipv4=24"),
			errs: []string{"--vip-block-bits-ipv4: 24 disagrees", "blockBitsV4=22", "mcsd-broker/mcsd-broker-settings"}},
		{name: "a VIP block outside the broker's ranges is named", args: append(controllersOnly, "--cluster-vip-cidrs=243.1.0.0/22"),
			errs: []string{"--cluster-vip-cidrs: 243.1.0.0/22 is not inside the clusterset ranges 10.250.0.0/16,fd00:250::/48", "mcsd-broker/mcsd-broker-settings"}},
		{name: "DNS and the proxier on the defaults refuse a broker with others", args: []string{"--broker-kubeconfig=/dev/null", "--node-name=node-1"},
			errs: []string{"--clusterset-cidrs: DNS and the proxier of this process run with the default 243.0.0.0/8", "give --clusterset-cidrs=10.250.0.0/16,fd00:250::/48"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, err := parse(t, tc.args...)
			if err != nil {
				t.Fatal(err)
			}
			got, err := o.rangesWithBroker(s)
			if tc.errs == nil {
				if err != nil {
					t.Fatal(err)
				}
				if got.String() != tc.want {
					t.Fatalf("ranges %s, want %s", got, tc.want)
				}
				return
			}
			if err == nil {
				t.Fatalf("accepted, running with %s", got)
			}
			for _, want := range tc.errs {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error does not say %q: %v", want, err)
				}
			}
		})
	}
}

func TestRangesWatchTellsOfAChange(t *testing.T) {
	s := brokerSettings()
	recorder := kuberecord.NewFakeRecorder(10)
	w := &rangesWatch{running: s.Ranges(), recorder: recorder, object: func() runtime.Object { return &corev1.ConfigMap{} }}
	settingsCM := func(s broker.Settings) *corev1.ConfigMap {
		objs, err := broker.Objects(s)
		if err != nil {
			t.Fatal(err)
		}
		for _, obj := range objs {
			if cm, ok := obj.(*corev1.ConfigMap); ok && cm.Name == broker.SettingsName {
				return cm
			}
		}
		t.Fatal("no settings ConfigMap in the broker's objects")
		return nil
	}
	events := func() []string {
		var out []string
		for {
			select {
			case e := <-recorder.Events:
				out = append(out, e)
			default:
				return out
			}
		}
	}

	w.observe(settingsCM(s))
	if got := events(); len(got) != 0 {
		t.Fatalf("the ranges the member runs with raised %q", got)
	}
	changed := s
	changed.BlockBitsV4 = 24
	cm := settingsCM(changed)
	w.observe(cm)
	w.observe(cm.DeepCopy()) // a resync
	got := events()
	if len(got) != 1 {
		t.Fatalf("events %q, want one", got)
	}
	for _, want := range []string{"Warning " + EventClusterSetRangesChanged, "now say clusterSetCIDRv4=10.250.0.0/16 blockBitsV4=24", "keeps running with clusterSetCIDRv4=10.250.0.0/16 blockBitsV4=22"} {
		if !strings.Contains(got[0], want) {
			t.Errorf("event %q does not say %q", got[0], want)
		}
	}
	w.observe(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: broker.SettingsName}})
	if got := events(); len(got) != 0 {
		t.Fatalf("unreadable settings raised %q", got)
	}
}
