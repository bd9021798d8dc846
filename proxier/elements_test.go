package proxier

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/klog/v2"
	"sigs.k8s.io/knftables"
)

func TestElementBatches(t *testing.T) {
	s := newElementStore(klog.Background(), 2)
	backend := func(i, ep string) element {
		return element{container: backendsMapName("tcp"), key: "243.1.0.10 . 80 . " + i, value: ep + " . 8080"}
	}
	s.diff(nil, []element{backend("0", "10.1.0.1"), backend("1", "10.1.0.2"), backend("2", "10.1.0.3"),
		{container: clustersetIPsSet, key: "243.1.0.10"}})
	tx := knftables.NewFake(knftables.IPv4Family, TableName).NewTransaction()
	s.write(tx)
	want := []string{
		"add element ip mcsd clusterset-ips { 243.1.0.10 }",
		"add element ip mcsd backends-tcp { 243.1.0.10 . 80 . 0 : 10.1.0.1 . 8080, 243.1.0.10 . 80 . 1 : 10.1.0.2 . 8080 }",
		"add element ip mcsd backends-tcp { 243.1.0.10 . 80 . 2 : 10.1.0.3 . 8080 }",
	}
	if diff := cmp.Diff(want, strings.Split(strings.TrimSpace(tx.String()), "\n")); diff != "" {
		t.Errorf("first transaction (-want +got):\n%s", diff)
	}

	t.Run("deletions come first, a changed value is deleted and added", func(t *testing.T) {
		s.diff([]element{backend("0", "10.1.0.1"), backend("1", "10.1.0.2"), backend("2", "10.1.0.3")},
			[]element{backend("0", "10.1.0.9"), backend("1", "10.1.0.2")})
		tx := knftables.NewFake(knftables.IPv4Family, TableName).NewTransaction()
		s.write(tx)
		want := []string{
			"delete element ip mcsd backends-tcp { 243.1.0.10 . 80 . 0, 243.1.0.10 . 80 . 2 }",
			"add element ip mcsd backends-tcp { 243.1.0.10 . 80 . 0 : 10.1.0.9 . 8080 }",
		}
		if diff := cmp.Diff(want, strings.Split(strings.TrimSpace(tx.String()), "\n")); diff != "" {
			t.Errorf("second transaction (-want +got):\n%s", diff)
		}
	})
}
