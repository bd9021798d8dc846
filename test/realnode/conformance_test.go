package realnode

import (
	"context"
	"net/netip"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/mcsd-io/mcsd/test/lib/conformance"
	"github.com/mcsd-io/mcsd/test/lib/echopod"
	"github.com/mcsd-io/mcsd/test/lib/harness"
)

// The upstream conformance suite's specs that send traffic (the DNS specs
// and the connectivity specs) on real nodes: backends are echo pods the
// scheduler places, and every spec asks from the client pods on both nodes
// of each cluster, through their cluster DNS (CoreDNS with the shipped
// snippet, as their resolv.conf says) and their node's mcsd, and connects
// to what the cluster DNS answers.
func testConformance(t *testing.T) {
	w := setup(t)
	var specs []conformance.Spec
	for _, s := range conformance.Specs {
		if s.Traffic {
			specs = append(specs, s)
		}
	}
	began := time.Now()
	// Real pods start in seconds, not at once as the harness's: every
	// wait gets more room than the upstream 20 s.
	world := conformance.NewWorld(platform{w}, conformance.Options{ResolveVia: conformance.ClusterDNS, Await: 2 * time.Minute, Settle: snippetCache})
	conformance.Run(t, world, specs)
	t.Logf("figure: %d conformance specs with traffic on real nodes in %v", len(specs), time.Since(began).Round(10*time.Millisecond))
}

// platform runs the conformance suite's pods on the real nodes.
type platform struct{ w *world }

func (p platform) Members() []conformance.Member {
	var out []conformance.Member
	for _, m := range p.w.members {
		out = append(out, conformance.Member{ID: m.id, Kube: m.Kube, MCS: m.MCS})
	}
	return out
}

func (p platform) Families() []corev1.IPFamily { return harness.IPv4Only }

// AddPod runs an echo pod and returns it once it is Ready.
func (p platform) AddPod(ctx context.Context, i int, spec conformance.PodSpec) (conformance.Pod, error) {
	m := p.w.members[i]
	return echopod.Start(ctx, m.Kube, m.Name, p.w.echo.Ref, spec)
}

// Requesters are the member's client pods, one on each node.
func (p platform) Requesters(_ *conformance.Env, i int) ([]conformance.Requester, error) {
	var out []conformance.Requester
	for _, c := range p.w.members[i].clients {
		out = append(out, echopod.Requester{Client: c.Client, MCSD: netip.AddrPortFrom(c.node.IP, mcsdDNSPort).String()})
	}
	return out, nil
}
