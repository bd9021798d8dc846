package proxier_test

import (
	"context"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/knftables"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
	mcsfake "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned/fake"

	"github.com/mcsd-io/mcsd/mcsslice"
	"github.com/mcsd-io/mcsd/proxier"
	"github.com/mcsd-io/mcsd/proxier/netfilter"
)

// conntrackByCNI stands for a CNI that clears conntrack entries itself.
type conntrackByCNI struct{}

func (conntrackByCNI) CleanStaleEntries(v1.IPFamily, map[netfilter.ServicePort][]netip.Addr) (int, error) {
	return 0, nil
}

func TestFeedWithholdsGoneClusters(t *testing.T) {
	ctx := t.Context()
	cart := &mcsv1beta1.ServiceImport{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "cart"},
		Spec: mcsv1beta1.ServiceImportSpec{
			Type:  mcsv1beta1.ClusterSetIP,
			IPs:   []string{"243.64.0.10"},
			Ports: []mcsv1beta1.ServicePort{{Name: "http", Protocol: v1.ProtocolTCP, Port: 80}},
		},
	}
	exported := mcsslice.ServicePorts{}
	exported.Add("http", v1.ProtocolTCP, 80)
	slice := func(cluster, ip string) *discoveryv1.EndpointSlice {
		return &discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{
				Namespace: "shop", Name: "cart-" + cluster,
				Labels:      map[string]string{mcsv1beta1.LabelServiceName: "cart", mcsv1beta1.LabelSourceCluster: cluster},
				Annotations: map[string]string{mcsslice.ServicePortsAnnotation: exported.Encode()},
			},
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Protocol: ptr.To(v1.ProtocolTCP), Port: ptr.To[int32](8080)}},
			Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{ip}}},
		}
	}
	east, west := slice("east", "10.1.0.7"), slice("west", "10.2.0.7")
	kube, mcs := kubefake.NewClientset(east, west), mcsfake.NewSimpleClientset(cart)
	nft := knftables.NewFake(knftables.IPv4Family, proxier.TableName)
	p, err := proxier.New(proxier.Config{
		ClusterID: "east", IPFamily: v1.IPv4Protocol, NFTables: nft,
		Conntrack: conntrackByCNI{}, MinSyncPeriod: 10 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	feed := proxier.StartFeed(t, kube, mcs, p)
	backendsAre := func(what string, want ...string) {
		t.Helper()
		var got []string
		err := wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			elements, _ := nft.ListElements(ctx, "map", "backends-tcp")
			got = got[:0]
			for _, e := range elements {
				for _, ip := range []string{"10.1.0.7", "10.2.0.7", "10.2.0.8"} {
					if strings.Contains(strings.Join(e.Value, " "), ip) {
						got = append(got, ip)
					}
				}
			}
			slices.Sort(got)
			return slices.Equal(got, want), nil
		})
		if err != nil {
			t.Fatalf("%s: backends %v, want %v", what, got, want)
		}
	}
	backendsAre("both clusters live", "10.1.0.7", "10.2.0.7")

	feed.SetGoneClusters(mcsslice.NewGoneClusters("West"))
	backendsAre("west gone", "10.1.0.7")
	// A change to a gone cluster's slice stays withheld.
	west.Endpoints = append(west.Endpoints, discoveryv1.Endpoint{Addresses: []string{"10.2.0.8"}})
	if _, err := kube.DiscoveryV1().EndpointSlices("shop").Update(ctx, west, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	east.Endpoints[0].Addresses = []string{"10.1.0.7"}
	east.Labels["touched"] = "yes"
	if _, err := kube.DiscoveryV1().EndpointSlices("shop").Update(ctx, east, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	backendsAre("west gone, its slice updated", "10.1.0.7")

	feed.SetGoneClusters(mcsslice.NewGoneClusters())
	backendsAre("west back, with its update", "10.1.0.7", "10.2.0.7", "10.2.0.8")
}
