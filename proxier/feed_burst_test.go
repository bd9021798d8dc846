package proxier

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/knftables"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
	mcsfake "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned/fake"

	"github.com/mcsd-io/mcsd/mcsslice"
)

// A cluster that goes is one slice update per service; they are applied
// by one sync, not by a first sync that carries a few of them and then,
// MinSyncPeriod later, another.
func TestFeedAppliesAGoneClusterInOneSync(t *testing.T) {
	ctx := t.Context()
	const services = 200
	exported := mcsslice.ServicePorts{}
	exported.Add("http", v1.ProtocolTCP, 80)
	var imports, slices []runtime.Object
	for i := range services {
		name := fmt.Sprintf("svc-%d", i)
		imports = append(imports, &mcsv1beta1.ServiceImport{
			ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name},
			Spec: mcsv1beta1.ServiceImportSpec{
				Type:  mcsv1beta1.ClusterSetIP,
				IPs:   []string{fmt.Sprintf("243.64.%d.%d", i/250, i%250+1)},
				Ports: []mcsv1beta1.ServicePort{{Name: "http", Protocol: v1.ProtocolTCP, Port: 80}},
			},
		})
		for c, cluster := range []string{"east", "west"} {
			slices = append(slices, &discoveryv1.EndpointSlice{
				ObjectMeta: metav1.ObjectMeta{
					Namespace: "shop", Name: name + "-" + cluster,
					Labels:      map[string]string{mcsv1beta1.LabelServiceName: name, mcsv1beta1.LabelSourceCluster: cluster},
					Annotations: map[string]string{mcsslice.ServicePortsAnnotation: exported.Encode()},
				},
				AddressType: discoveryv1.AddressTypeIPv4,
				Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Protocol: ptr.To(v1.ProtocolTCP), Port: ptr.To[int32](8080)}},
				Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{fmt.Sprintf("10.%d.%d.%d", c+1, i/250, i%250+1)}}},
			})
		}
	}
	kube, mcs := kubefake.NewClientset(slices...), mcsfake.NewSimpleClientset(imports...)
	nft := knftables.NewFake(knftables.IPv4Family, TableName)
	reg := prometheus.NewRegistry()
	queued := &queueCounter{}
	p, err := New(Config{
		ClusterID: "east", IPFamily: v1.IPv4Protocol, NFTables: nft, Conntrack: &fakeConntrack{}, Registerer: reg, Health: queued,
		// After the first sync and one more, a sync waits this long: a
		// burst applied piecemeal would not finish within the test.
		MinSyncPeriod: time.Hour, SyncPeriod: time.Hour,
	})
	if err != nil {
		t.Fatal(err)
	}
	feed := StartFeed(t, kube, mcs, p)
	westEndpoints := func() (n int) {
		elements, _ := nft.ListElements(ctx, "map", "backends-tcp")
		for _, e := range elements {
			if strings.HasPrefix(strings.Join(e.Value, " "), "10.2.") {
				n++
			}
		}
		return n
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		if err := wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
			return cond(), nil
		}); err != nil {
			t.Fatalf("%s: %v (%d of west's endpoints in the table)", what, err, westEndpoints())
		}
	}
	waitFor("the first sync", func() bool { return westEndpoints() == services })

	before := queued.n.Load()
	feed.SetGoneClusters(mcsslice.NewGoneClusters("west"))
	if asked := queued.n.Load() - before; asked != 1 {
		t.Errorf("west's departure asked for %d syncs, want 1", asked)
	}
	waitFor("west gone", func() bool { return westEndpoints() == 0 })
	// The sync is observed once nft has taken it.
	waitFor("the sync observed", func() bool {
		return observations(t, reg, "mcsd_proxier_sync_partial_proxy_rules_duration_seconds") > 0
	})
	if got := observations(t, reg, "mcsd_proxier_sync_partial_proxy_rules_duration_seconds"); got != 1 {
		t.Errorf("west's departure took %d partial syncs, want 1 (%d syncs in all)", got,
			observations(t, reg, "mcsd_proxier_sync_proxy_rules_duration_seconds"))
	}
}

// queueCounter counts the syncs asked for.
type queueCounter struct{ n atomic.Int64 }

func (q *queueCounter) QueuedUpdate(v1.IPFamily) { q.n.Add(1) }
func (q *queueCounter) Updated(v1.IPFamily)      {}
