package main

import (
	"context"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/mcsd-io/mcsd/broker"
	"github.com/mcsd-io/mcsd/test/lib/fixture"
	"github.com/mcsd-io/mcsd/test/lib/harness"
	"github.com/mcsd-io/mcsd/vipalloc"
)

// A member runs with the broker's clusterset ranges: flags that disagree
// stop it naming both values, and a change on the broker while it runs is
// told and changes nothing.
func TestClusterSetRangesFromTheBroker(t *testing.T) {
	if testing.Short() {
		t.Skip("runs API servers and a node network namespace")
	}
	settings := broker.Settings{
		ClusterSetCIDRv4: netip.MustParsePrefix("244.10.0.0/16"),
		ClusterSetCIDRv6: netip.MustParsePrefix("fd00:244::/48"),
		BlockBitsV4:      26,
	}.WithDefaults()
	cs := harness.Start(t, harness.Options{Clusters: 1})
	m := fixture.JoinWith(t, cs, settings)[0]
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	node, err := m.AddNode(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The member claims its blocks itself, at the broker's size.
	claims := cs.Broker.Kube.CoreV1().ConfigMaps(broker.DefaultNamespace)
	for _, family := range []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol} {
		if err := claims.Delete(ctx, vipalloc.ClaimName(m.ID, family), metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	rangesFlag := "--clusterset-cidrs=" + joinPrefixes([]netip.Prefix{settings.ClusterSetCIDRv4, settings.ClusterSetCIDRv6})

	t.Run("a block size other than the broker's stops the daemon, naming the flag, both values and the settings", func(t *testing.T) {
		d, err := fixture.RunDaemon(ctx, cs, m, node, fixture.DaemonOptions{Name: "mcsd-disagrees", Args: []string{rangesFlag, "--vip-block-bits-ipv4=24"}})
		if d != nil {
			defer d.Terminate(10 * time.Second)
		}
		if err == nil {
			t.Fatal("the daemon became ready with --vip-block-bits-ipv4=24 against the broker's 26")
		}
		for _, want := range []string{"--vip-block-bits-ipv4: 24 disagrees with the broker's settings mcsd-broker/mcsd-broker-settings", "blockBitsV4=26"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("the daemon's end does not say %q:\n%v", want, err)
			}
		}
	})

	d := fixture.StartDaemon(t, cs, m, node, fixture.DaemonOptions{Args: []string{rangesFlag}})
	v4Claim := func() vipalloc.Claim {
		t.Helper()
		cm, err := claims.Get(ctx, vipalloc.ClaimName(m.ID, corev1.IPv4Protocol), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		c, err := vipalloc.ParseClaim(cm)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	before := v4Claim()
	t.Run("without block flags the member claims the broker's block size in the broker's range", func(t *testing.T) {
		if before.Block.Bits() != 26 || !settings.ClusterSetCIDRv4.Contains(before.Block.Addr()) {
			t.Fatalf("claimed %s, want a /26 of %s", before.Block, settings.ClusterSetCIDRv4)
		}
	})

	t.Run("a change on the broker is an event and a log line naming both values; the member keeps its block", func(t *testing.T) {
		cm, err := claims.Get(ctx, broker.SettingsName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cm.Data["blockBitsV4"] = strconv.Itoa(25)
		if _, err := claims.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		var event *corev1.Event
		err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
			list, err := m.Kube.CoreV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("reason", EventClusterSetRangesChanged).String()})
			if err != nil || len(list.Items) == 0 {
				return false, nil
			}
			event = &list.Items[0]
			return true, nil
		})
		if err != nil {
			t.Fatalf("no %s event: %v\n%s", EventClusterSetRangesChanged, err, d.Tail(20))
		}
		for _, want := range []string{"now say clusterSetCIDRv4=244.10.0.0/16 blockBitsV4=25", "keeps running with clusterSetCIDRv4=244.10.0.0/16 blockBitsV4=26"} {
			if !strings.Contains(event.Message, want) {
				t.Errorf("event %q does not say %q", event.Message, want)
			}
		}
		log, err := os.ReadFile(d.LogPath())
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(log), `"The broker's clusterset ranges changed`) || !strings.Contains(string(log), `broker="clusterSetCIDRv4=244.10.0.0/16 blockBitsV4=25`) {
			t.Errorf("no log line naming the broker's new ranges:\n%s", d.Tail(20))
		}
		if after := v4Claim(); after.Block != before.Block || after.Revision != before.Revision {
			t.Fatalf("the claim moved from %s to %s", before.Block, after.Block)
		}
		if done, err := d.Exited(); done {
			t.Fatalf("the daemon exited: %v\n%s", err, d.Tail(20))
		}
	})
}
