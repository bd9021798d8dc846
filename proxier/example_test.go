package proxier_test

import (
	"context"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"testing"

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
	"github.com/mcsd-io/mcsd/test/lib/netns"
	"github.com/mcsd-io/mcsd/test/lib/testenv"
)

// TestMain runs the package's tests on fake clientsets. Example programs
// the real kernel, so it is left out where the real-kernel tests skip
// (testenv: under -short); an example has no t.Skip, so -skip does it.
func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		skip := "^Example$"
		if old := flag.Lookup("test.skip").Value.String(); old != "" {
			skip = old + "|" + skip
		}
		if err := flag.Set("test.skip", skip); err != nil {
			panic(err)
		}
		fmt.Fprintln(os.Stderr, "--- SKIP: Example: it programs a network namespace of its own with the real nft, needs root; skipped under -short")
	}
	testenv.RunWithFakeClientsets(m)
}

// carriedVIPs is a VIPObserver: it hands on each ClusterSetIP the
// proxier's committed rules start carrying. The sync loop calls it, so it
// must not block.
type carriedVIPs chan netip.Addr

func (c carriedVIPs) VIPsProgrammed(_ v1.IPFamily, added, _ []netip.Addr) {
	for _, vip := range added {
		select {
		case c <- vip:
		default:
		}
	}
}

// A CNI embeds the proxier by feeding it from its own informers:
// ServiceImports from the mcs-api clientset, and only the EndpointSlices
// labelled with multicluster.kubernetes.io/service-name (those of imported
// services) from client-go's. Fake clientsets stand in for the CNI's real
// clients here; the kernel is real. The rules go into a network namespace
// the example makes for the node, and are deleted at the end, as by a CNI
// that stops using the proxier for good. It needs root and nft.
func Example() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	// The node's network namespace. A CNI passes the one it programs, or
	// no InNetns at all for its own.
	node, err := netns.New(fmt.Sprintf("mcsdexample%d", os.Getpid()))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = node.Delete() }()

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

	carried := make(carriedVIPs, 1)
	p, err := proxier.New(proxier.Config{
		ClusterID:       "east",
		IPFamily:        v1.IPv4Protocol,
		InNetns:         node.Do, // nsenter.Do of the namespace's path
		PodCIDRs:        []string{"10.1.0.0/16"},
		ClusterSetCIDRs: []netip.Prefix{netip.MustParsePrefix("243.64.0.0/12")},
		VIPObserver:     carried,
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
	loopDone := make(chan struct{})
	go func() {
		defer close(loopDone)
		p.SyncLoop(ctx)
	}()
	// Once both initial lists are in, the feed asks for the first sync, so
	// nothing is programmed from half a view. Then the loop applies
	// changes as they come.
	if !feed.Run(ctx) {
		return
	}
	fmt.Println("carried:", <-carried)

	// Read the rules back from the node's kernel: the port's entry in the
	// dispatch map, and its endpoint in the TCP backends map.
	var nft knftables.Interface
	inNode := func(fn func() error) {
		if err := node.Do(fn); err != nil {
			fmt.Println(err)
		}
	}
	inNode(func() (err error) {
		nft, err = knftables.New(knftables.IPv4Family, proxier.TableName)
		return err
	})
	if nft == nil {
		return
	}
	for _, m := range []string{"service-ips", "backends-tcp"} {
		inNode(func() error {
			elements, err := nft.ListElements(ctx, "map", m)
			for _, e := range elements {
				fmt.Printf("%s: %s -> %s\n", m, strings.Join(e.Key, " . "), strings.Join(e.Value, " . "))
			}
			return err
		})
	}

	// Stop the sync loop, then delete the rules. (mcsd leaves them in
	// place when it stops, so that traffic keeps flowing across a restart.)
	cancel()
	<-loopDone
	if err := proxier.CleanupLeftovers(context.Background(), proxier.ModeAuto, node.Do); err != nil {
		fmt.Println(err)
	}
	inNode(func() error {
		_, err := nft.List(context.Background(), "chains")
		fmt.Println("table ip mcsd gone:", knftables.IsNotFound(err))
		return nil
	})
	if err := node.Delete(); err != nil {
		fmt.Println(err)
	}

	// Output:
	// carried: 243.64.0.10
	// service-ips: 243.64.0.10 . tcp . 80 -> goto lb-tcp-1
	// backends-tcp: 243.64.0.10 . 80 . 0 -> 10.2.0.7 . 8080
	// table ip mcsd gone: true
}
