package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"

	"github.com/mcsd-io/mcsd/test/lib/conformance"
	"github.com/mcsd-io/mcsd/test/lib/echo"
	"github.com/mcsd-io/mcsd/test/lib/fixture"
	"github.com/mcsd-io/mcsd/test/lib/harness"
)

// clusterSet is the one ClusterSet every spec runs in: a broker and two
// member clusters, one node each, one mcsd per cluster with its data plane
// and DNS server in that node. It is the conformance suite's platform:
// pods are the harness's network namespaces, the requester of a spec is a
// pod on the node whose mcsd answers its DNS queries, and the cluster DNS
// is a CoreDNS per spec (clusterdns_test.go).
type clusterSet struct {
	cs      *harness.ClusterSet
	members []*fixture.Member
	nodes   []*harness.Node
	daemons []*fixture.Daemon
	// families are the IP families every member serves.
	families []corev1.IPFamily
	world    *conformance.World
}

// startClusterSet starts IPv4-only clusters.
func startClusterSet(t *testing.T) *clusterSet {
	t.Helper()
	return startClusterSetWith(t, harness.Options{Clusters: 2})
}

// startClusterSetWith starts the clusters opts asks for (IP families, for
// one), each with one node and its mcsd, run for the cluster's families.
func startClusterSetWith(t *testing.T, opts harness.Options) *clusterSet {
	t.Helper()
	cs := harness.Start(t, opts)
	s := &clusterSet{cs: cs, members: fixture.Join(t, cs), families: harness.SharedFamilies(cs.Members...)}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	for _, m := range s.members {
		node, err := m.AddNode(ctx)
		if err != nil {
			t.Fatalf("adding a node to %s: %v", m.ID, err)
		}
		s.nodes = append(s.nodes, node)
		s.daemons = append(s.daemons, fixture.StartDaemon(t, cs, m, node, fixture.DaemonOptions{}))
	}
	s.world = conformance.NewWorld(s, conformance.Options{ResolveVia: conformance.MCSD})
	return s
}

// begin starts a spec's world.
func (s *clusterSet) begin(t *testing.T) *conformance.Env { return s.world.Begin(t) }

// Members implements conformance.Platform.
func (s *clusterSet) Members() []conformance.Member {
	var out []conformance.Member
	for _, m := range s.members {
		out = append(out, conformance.Member{ID: m.ID, Kube: m.Kube, MCS: m.MCS})
	}
	return out
}

// Families implements conformance.Platform.
func (s *clusterSet) Families() []corev1.IPFamily { return s.families }

// AddPod implements conformance.Platform: a harness pod on cluster i's
// node.
func (s *clusterSet) AddPod(ctx context.Context, i int, spec conformance.PodSpec) (conformance.Pod, error) {
	p, err := s.nodes[i].AddPod(ctx, harness.PodSpec{
		Namespace: spec.Namespace, Name: spec.Name, Labels: spec.Labels,
		Hostname: spec.Hostname, Subdomain: spec.Subdomain, Ports: spec.Ports,
	})
	if err != nil {
		return nil, err
	}
	return harnessPod{p}, nil
}

// Requesters implements conformance.Platform: a request pod in the spec's
// namespace on cluster i's node, asking that node's mcsd, and the
// cluster's own DNS started for the spec on first use.
func (s *clusterSet) Requesters(e *conformance.Env, i int) ([]conformance.Requester, error) {
	p := e.AddPod(i, conformance.PodSpec{Name: "request", Labels: map[string]string{"app": "request"}})
	return []conformance.Requester{&requester{s: s, i: i, pod: p.(harnessPod).Pod, root: e.Root()}}, nil
}

// harnessPod is a harness pod as the suite sees it.
type harnessPod struct{ *harness.Pod }

func (p harnessPod) Name() string { return p.Pod.Name }

// requester is a spec's request pod of one cluster.
type requester struct {
	s    *clusterSet
	i    int
	pod  *harness.Pod
	root *testing.T

	once sync.Once
	dns  *clusterDNS
}

func (r *requester) String() string { return r.s.members[r.i].ID + "/" + r.pod.Name }

// Query asks the node's mcsd from inside the pod, or the cluster's own DNS
// (CoreDNS listens on loopback: from the test process).
func (r *requester) Query(ctx context.Context, server conformance.Server, network, name string, qtype uint16) (*dns.Msg, error) {
	if server == conformance.ClusterDNS {
		r.once.Do(func() { r.dns = startClusterDNS(r.root, r.s.cs, r.s.members[r.i], r.s.nodes[r.i], r.s.daemons[r.i]) })
		return r.dns.queryOver(network, name, qtype)
	}
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), qtype)
	var resp *dns.Msg
	err := r.pod.NS.Do(func() error {
		timeout := 2 * time.Second
		if d, ok := ctx.Deadline(); ok {
			timeout = min(timeout, time.Until(d))
		}
		var err error
		resp, _, err = (&dns.Client{Net: network, Timeout: timeout}).Exchange(m, r.s.daemons[r.i].DNS.String())
		return err
	})
	return resp, err
}

// Ask connects from inside the pod.
func (r *requester) Ask(ctx context.Context, network, address string) (echo.Identity, error) {
	if _, err := netip.ParseAddrPort(address); err != nil {
		return echo.Identity{}, fmt.Errorf("%s is not a literal address: %w", address, err)
	}
	return r.pod.Ask(ctx, network, address)
}
