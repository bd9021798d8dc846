// Command gatenode runs one node's part of the DNS gate (package dnsgate)
// and nothing else of a node agent, or with -controller the controller's
// part (the Aggregator), against a cluster's API server. test/scale's
// BenchmarkDNSGate starts hundreds of them, one process per simulated
// node, where as many whole node agents would not fit the machine: the
// gate's report writer and summary watcher are the production code, fed
// by the same ServiceImport informer a node agent's proxier uses.
//
// Its stand-in proxier carries a ClusterSetIP as soon as the ServiceImport
// listing it is seen, so that what is measured is the gate's own delay.
// Each ClusterSetIP the gate releases to DNS is printed on standard output
// as "released <address> <unix nanoseconds>".
package main

import (
	"context"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
	mcsclient "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned"
	mcsinformers "sigs.k8s.io/mcs-api/pkg/client/informers/externalversions"

	"github.com/mcsd-io/mcsd/dnsgate"
)

func main() {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig of the cluster")
	namespace := flag.String("namespace", "mcsd-system", "namespace of the reports and the summary")
	nodeName := flag.String("node-name", "", "name of the simulated node (not with -controller)")
	controller := flag.Bool("controller", false, "run the controller's Aggregator instead of a node's gate")
	klog.InitFlags(nil)
	flag.Parse()
	if *kubeconfig == "" {
		fail(fmt.Errorf("-kubeconfig is required"))
	}
	if !*controller && *nodeName == "" {
		fail(fmt.Errorf("-node-name is required without -controller"))
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		fail(fmt.Errorf("-kubeconfig %s: %w", *kubeconfig, err))
	}
	// mcsd's default client limits (--kube-api-qps, --kube-api-burst).
	cfg.QPS, cfg.Burst = 500, 1000
	kube := kubernetes.NewForConfigOrDie(cfg)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	if *controller {
		agg, err := dnsgate.NewAggregator(dnsgate.AggregatorConfig{Client: kube, Namespace: *namespace, Holder: "gatenode-controller"})
		if err != nil {
			fail(err)
		}
		agg.Run(ctx)
		return
	}

	factory := mcsinformers.NewSharedInformerFactory(mcsclient.NewForConfigOrDie(cfg), 0)
	imports := factory.Multicluster().V1beta1().ServiceImports().Informer()
	gate, err := dnsgate.New(dnsgate.Config{
		Client:     kube,
		Namespace:  *namespace,
		NodeName:   *nodeName,
		Families:   []corev1.IPFamily{corev1.IPv4Protocol},
		Imports:    imports,
		Downstream: &printer{},
	})
	if err != nil {
		fail(err)
	}
	if _, err := imports.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { carry(gate, obj, true) },
		UpdateFunc: func(_, obj any) { carry(gate, obj, true) },
		DeleteFunc: func(obj any) { carry(gate, obj, false) },
	}); err != nil {
		fail(err)
	}
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), imports.HasSynced) {
		return
	}
	// The proxier's first sync: the family is programmed, with what the
	// handlers above already carried.
	gate.VIPsProgrammed(corev1.IPv4Protocol, nil, nil)
	gate.Run(ctx)
}

// carry tells the gate that the stand-in proxier carries (or no longer
// carries) the IPv4 ClusterSetIPs of a ServiceImport.
func carry(gate *dnsgate.Gate, obj any, carried bool) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	si, ok := obj.(*mcsv1beta1.ServiceImport)
	if !ok {
		return
	}
	var vips []netip.Addr
	for _, s := range si.Spec.IPs {
		if a, err := netip.ParseAddr(s); err == nil && a.Unmap().Is4() {
			vips = append(vips, a.Unmap())
		}
	}
	if carried {
		gate.VIPsProgrammed(corev1.IPv4Protocol, vips, nil)
	} else {
		gate.VIPsProgrammed(corev1.IPv4Protocol, nil, vips)
	}
}

// printer is the gate's downstream in place of the DNS index: it prints
// what may be handed out, and when.
type printer struct{ mu sync.Mutex }

func (p *printer) VIPsProgrammed(_ corev1.IPFamily, added, _ []netip.Addr) {
	now := time.Now().UnixNano()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, a := range added {
		fmt.Printf("released %s %d\n", a, now)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "gatenode:", err)
	os.Exit(2)
}
