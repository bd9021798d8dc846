// Package conformance is the upstream MCS API conformance suite
// (sigs.k8s.io/mcs-api, conformance/) as a library: one function per
// upstream spec, named with the spec's own text, asserting what the
// upstream spec asserts, with the same 20 s bounds by default. It runs on
// whatever runs pods: the loopback harness (test/e2e: pods are network
// namespaces, mcsd runs as a process per cluster) and real kubelets
// (test/realnode: pods are containers, mcsd is the shipped DaemonSet).
// A Platform says how pods start and where requests come from; the suite
// does the rest through the member clusters' API servers.
//
// Pods are echo servers instead of Deployments and StatefulSets; DNS is
// asked with a DNS client from inside a requester pod's network namespace
// instead of nslookup, both of mcsd's server and of the cluster's own DNS
// (CoreDNS with the shipped snippet); connections go from the requester
// pods through the proxier instead of nc.
package conformance

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	mcsclient "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned"

	aboutv1beta1 "github.com/mcsd-io/mcsd/apis/about/v1beta1"
	"github.com/mcsd-io/mcsd/test/lib/echo"
)

// Member is a member cluster as the suite sees it.
type Member struct {
	// ID is the cluster's ID, as mcsd resolved it.
	ID   string
	Kube kubernetes.Interface
	MCS  mcsclient.Interface
}

// PodSpec describes a pod the suite starts: an echo server answering TCP
// and UDP on each of Ports (default 8080) with "<ip> <cluster> <name>".
type PodSpec struct {
	Namespace, Name string
	Labels          map[string]string
	// Hostname and Subdomain are set in the Pod spec, as a StatefulSet's
	// pods have them, so headless Services publish the hostname.
	Hostname, Subdomain string
	Ports               []int32
}

// Pod is a running pod the suite started.
type Pod interface {
	// Name is the pod's name.
	Name() string
	// IPOf is the pod's address of an IP family, if it has one.
	IPOf(corev1.IPFamily) (netip.Addr, bool)
	// Delete removes the pod.
	Delete(ctx context.Context) error
}

// Server is a DNS server a requester asks.
type Server int

const (
	// MCSD is the clusterset DNS server of mcsd that serves the
	// requester's node.
	MCSD Server = iota
	// ClusterDNS is the cluster's own DNS (CoreDNS with the shipped
	// snippet), as the requester's resolv.conf names it.
	ClusterDNS
)

func (s Server) String() string {
	if s == MCSD {
		return "mcsd"
	}
	return "the cluster DNS"
}

// Requester is a pod the suite asks DNS and connects from.
type Requester interface {
	String() string
	// Query asks server over network ("udp" or "tcp") from inside the
	// pod.
	Query(ctx context.Context, server Server, network, name string, qtype uint16) (*dns.Msg, error)
	// Ask connects from inside the pod to a literal address and returns
	// who answered.
	Ask(ctx context.Context, network, address string) (echo.Identity, error)
}

// Platform runs the suite's pods.
type Platform interface {
	// Members are the member clusters, in order.
	Members() []Member
	// Families are the IP families every member serves.
	Families() []corev1.IPFamily
	// AddPod starts a pod in cluster i and returns it once it answers.
	AddPod(ctx context.Context, i int, spec PodSpec) (Pod, error)
	// Requesters returns the pods of cluster i that a spec asks from.
	// Pods the platform starts for the spec are started with e.AddPod, so
	// the spec's end deletes them.
	Requesters(e *Env, i int) ([]Requester, error)
}

// World is a clusterset the specs run in.
type World struct {
	p        Platform
	members  []Member
	families []corev1.IPFamily
	// resolveVia is the DNS server whose answers the connectivity specs
	// connect to.
	resolveVia Server
	// await bounds what must happen.
	await time.Duration
	// settle is how long a name must have resolved before the specs hold
	// its answers to every query.
	settle time.Duration
}

// Options of NewWorld.
type Options struct {
	// ResolveVia is the server the connectivity specs resolve names with
	// before they connect (default MCSD).
	ResolveVia Server
	// Await bounds every wait for what must happen (default the upstream
	// suite's 20 s).
	Await time.Duration
	// Settle is how long a name must have resolved without a miss before
	// the connectivity specs require every later answer to hold it: a
	// cluster DNS of several caching replicas (CoreDNS with the snippet's
	// `cache 5`) may still answer NXDOMAIN from a replica's cache that
	// long after another replica first resolves the name. Zero when the
	// requesters ask one server.
	Settle time.Duration
}

// NewWorld returns the world of a platform.
func NewWorld(p Platform, o Options) *World {
	if o.Await <= 0 {
		o.Await = AwaitTimeout
	}
	return &World{p: p, members: p.Members(), families: p.Families(), resolveVia: o.ResolveVia, await: o.Await, settle: o.Settle}
}

// Members are the world's member clusters.
func (w *World) Members() []Member { return w.members }

// Families are the IP families every member serves.
func (w *World) Families() []corev1.IPFamily { return w.families }

// Spec is one upstream spec.
type Spec struct {
	// Name is the upstream spec's text.
	Name string
	Run  func(*testing.T, *World)
	// Traffic says the spec asks DNS or connects from pods; the others
	// check only what the API servers hold.
	Traffic bool
}

// Run runs specs, each as a subtest named with its text.
func Run(t *testing.T, w *World, specs []Spec) {
	for _, s := range specs {
		t.Run(s.Name, func(t *testing.T) { s.Run(t, w) })
	}
}

// RecordedClusterID waits until mcsd has resolved and recorded cluster's ID
// (the ClusterProperty cluster.clusterset.k8s.io) and returns it.
func RecordedClusterID(ctx context.Context, dyn dynamic.Interface, cluster string) (string, error) {
	gvr := aboutv1beta1.SchemeGroupVersion.WithResource(aboutv1beta1.Resource)
	var id string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		obj, err := dyn.Resource(gvr).Get(ctx, aboutv1beta1.ClusterIDName, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		id, _, _ = unstructured.NestedString(obj.Object, "spec", "value")
		return id != "", nil
	})
	if err != nil {
		return "", fmt.Errorf("%s: no cluster ID recorded: %w", cluster, err)
	}
	return id, nil
}
