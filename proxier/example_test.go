package proxier_test

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/knftables"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
	mcsfake "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned/fake"
	mcsinformers "sigs.k8s.io/mcs-api/pkg/client/informers/externalversions"

	"github.com/mcsd-io/mcsd/mcsslice"
	"github.com/mcsd-io/mcsd/proxier"
	"github.com/mcsd-io/mcsd/test/lib/testenv"
)

func TestMain(m *testing.M) { testenv.RunWithFakeClientsets(m) }

// conntrackByCNI stands for a CNI that clears conntrack entries itself.
type conntrackByCNI struct{}

func (conntrackByCNI) CleanStaleEntries(v1.IPFamily, map[proxier.ServicePort][]netip.Addr) (int, error) {
	return 0, nil
}

// A CNI embeds the proxier by feeding it from its own informers: ServiceImports
// from the mcs-api clientset, and only the EndpointSlices labelled with
// multicluster.kubernetes.io/service-name (those of imported services) from
// client-go's. The fakes here stand in for the CNI's real clients, and
// knftables.NewFake for the kernel.
func Example() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	// What the importer wrote in this cluster: the import of shop/cart,
	// and the endpoints cluster "west" exports for it.
	cart := &mcsv1beta1.ServiceImport{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "cart"},
		Spec: mcsv1beta1.ServiceImportSpec{
			Type:  mcsv1beta1.ClusterSetIP,
			IPs:   []string{"243.64.0.10"},
			Ports: []mcsv1beta1.ServicePort{{Name: "http", Protocol: v1.ProtocolTCP, Port: 80}},
		},
	}
	exported := mcsslice.ServicePorts{}
	exported.Add("http", v1.ProtocolTCP, 80) // west serves "http" on port 80
	west := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: "shop", Name: "cart-west",
			Labels: map[string]string{
				mcsv1beta1.LabelServiceName:   "cart",
				mcsv1beta1.LabelSourceCluster: "west",
			},
			Annotations: map[string]string{mcsslice.ServicePortsAnnotation: exported.Encode()},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Protocol: ptr.To(v1.ProtocolTCP), Port: ptr.To[int32](8080)}},
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"10.2.0.7"}}},
	}
	kube := kubefake.NewClientset(west)
	mcs := mcsfake.NewSimpleClientset(cart)

	nft := knftables.NewFake(knftables.IPv4Family, proxier.TableName)
	p, err := proxier.New(proxier.Config{
		ClusterID:     "east",
		IPFamily:      v1.IPv4Protocol,
		NFTables:      nft,
		Conntrack:     conntrackByCNI{},
		PodCIDRs:      []string{"10.1.0.0/16"},
		MinSyncPeriod: 10 * time.Millisecond,
	})
	if err != nil {
		fmt.Println(err)
		return
	}

	kubeInformers := informers.NewSharedInformerFactoryWithOptions(kube, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = mcsv1beta1.LabelServiceName }))
	mcsInformers := mcsinformers.NewSharedInformerFactory(mcs, 0)
	feed, err := proxier.NewFeed(mcsInformers.Multicluster().V1beta1().ServiceImports().Informer(),
		kubeInformers.Discovery().V1().EndpointSlices().Informer(), p)
	if err != nil {
		fmt.Println(err)
		return
	}
	kubeInformers.Start(ctx.Done())
	mcsInformers.Start(ctx.Done())
	go p.SyncLoop(ctx)
	// Once both initial lists are in, the feed asks for the first sync, so
	// nothing is programmed from half a view. Then the loop applies
	// changes as they come.
	if !feed.Run(ctx) {
		return
	}

	// backends lists the endpoints of shop/cart's port once the sync loop
	// has programmed n of them.
	backends := func(n int) []*knftables.Element {
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			if elements, _ := nft.ListElements(ctx, "map", "backends-tcp"); len(elements) == n {
				return elements
			}
		}
		return nil
	}
	for _, e := range backends(1) {
		fmt.Println("backends:", e.Key, "->", e.Value)
	}
	dispatch, _ := nft.ListElements(ctx, "map", "service-ips")
	for _, e := range dispatch {
		fmt.Println("service-ips:", e.Key, "->", e.Value)
	}

	// West scales up: the informer delivers the change, and the next
	// (partial) sync adds one element and points the port at the chain
	// that balances over two.
	west.Endpoints = append(west.Endpoints, discoveryv1.Endpoint{Addresses: []string{"10.2.0.8"}})
	if _, err := kube.DiscoveryV1().EndpointSlices("shop").Update(ctx, west, metav1.UpdateOptions{}); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("after west scaled up:")
	for _, e := range backends(2) {
		fmt.Println("backends:", e.Key, "->", e.Value)
	}
	dispatch, _ = nft.ListElements(ctx, "map", "service-ips")
	for _, e := range dispatch {
		fmt.Println("service-ips:", e.Key, "->", e.Value)
	}

	// Output:
	// backends: [243.64.0.10 80 0] -> [10.2.0.7 8080]
	// service-ips: [243.64.0.10 tcp 80] -> [goto lb-tcp-1]
	// after west scaled up:
	// backends: [243.64.0.10 80 0] -> [10.2.0.7 8080]
	// backends: [243.64.0.10 80 1] -> [10.2.0.8 8080]
	// service-ips: [243.64.0.10 tcp 80] -> [goto lb-tcp-2]
}
