package status

import (
	"net/netip"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/mcsd-io/mcsd/broker"
	"github.com/mcsd-io/mcsd/internal/record"
	"github.com/mcsd-io/mcsd/liveness"
	"github.com/mcsd-io/mcsd/vipalloc"
)

func lease(cluster string, renewed time.Time) coordinationv1.Lease {
	return coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: record.LeaseName(cluster), Labels: record.LeaseLabels(cluster)},
		Spec:       coordinationv1.LeaseSpec{RenewTime: &metav1.MicroTime{Time: renewed}},
	}
}

func export(cluster string, port int32, created time.Time) record.Export {
	return record.Export{
		Cluster: cluster, Namespace: "shop", Name: "web", Created: metav1.NewTime(created),
		Type:       mcsv1beta1.ClusterSetIP,
		Ports:      []mcsv1beta1.ServicePort{{Name: "http", Port: port, Protocol: corev1.ProtocolTCP}},
		IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol},
	}
}

// A cluster's state is what the member's liveness ConfigMap says, whatever
// its Lease's age on the reader's clock: the importer judges Leases on its
// own clock, and the operator must see what the nodes act on.
func TestClustersTakeTheirStateFromTheMembersLivenessAndCountConflicts(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	s := &Snapshot{
		Read:   now,
		Leases: []coordinationv1.Lease{lease("east", now.Add(-2*time.Second)), lease("west", now.Add(-11*time.Second))},
		Declarations: []broker.Declaration{
			{Cluster: "east", PodCIDRs: []netip.Prefix{netip.MustParsePrefix("10.1.0.0/16")}},
			{Cluster: "north", PodCIDRs: []netip.Prefix{netip.MustParsePrefix("10.3.0.0/16")}},
		},
		// west's port http is 81 where east's older export says 80: both
		// exports are in conflict.
		Records: []record.Export{export("east", 80, now.Add(-time.Hour)), export("west", 81, now)},
		Invalid: map[string]int{"west": 1},
		Claims: []vipalloc.Claim{
			{Cluster: "east", Block: netip.MustParsePrefix("243.0.0.0/16"), Name: "clustersetip-east-ipv4", Revision: 1},
			// Overlaps east's older claim: owns nothing.
			{Cluster: "west", Block: netip.MustParsePrefix("243.0.0.0/16"), Name: "clustersetip-west-ipv4", Revision: 2},
		},
	}
	// west's Lease is 11 s old here, but the member saw it renewed.
	live := &liveness.State{Clusters: map[string]string{"east": liveness.Live, "west": liveness.Live}, BrokerReachable: true}
	got := map[string]Cluster{}
	for _, c := range s.Clusters(live) {
		got[c.ID] = c
	}
	if len(got) != 3 {
		t.Fatalf("clusters %v, want east, west and north", got)
	}
	if c := got["east"]; c.State != liveness.Live || c.LeaseAge != 2*time.Second || c.Exports != 1 || c.Conflicts != 1 || !c.Declared || len(c.Blocks) != 1 {
		t.Errorf("east: %+v", c)
	}
	if c := got["west"]; c.State != liveness.Live || c.LeaseAge != 11*time.Second || c.Exports != 1 || c.Invalid != 1 || c.Conflicts != 1 || c.Declared || len(c.Blocks) != 0 {
		t.Errorf("west: %+v", c)
	}
	if c := got["north"]; c.State != liveness.Unknown || c.RenewTime != nil || !c.Declared || c.PodCIDRs[0] != "10.3.0.0/16" {
		t.Errorf("north: %+v", c)
	}
	for _, c := range s.Clusters(nil) {
		if c.State != liveness.Unknown {
			t.Errorf("without a liveness ConfigMap, %s is %s", c.ID, c.State)
		}
	}
	live.Clusters["west"] = liveness.Gone
	for _, c := range s.Clusters(live) {
		if c.ID == "west" && c.State != liveness.Gone {
			t.Errorf("west published gone is %s", c.State)
		}
	}
}
