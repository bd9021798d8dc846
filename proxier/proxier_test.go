package proxier

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/knftables"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/mcsd-io/mcsd/mcsslice"
	"github.com/mcsd-io/mcsd/proxier/netfilter"
)

const vip = "243.1.0.10"

func nameOf(si *mcsv1beta1.ServiceImport) types.NamespacedName {
	return types.NamespacedName{Namespace: si.Namespace, Name: si.Name}
}

// webImport is the import most tests use: http/TCP/80 and dns/UDP/53.
func webImport(opts ...importOption) *mcsv1beta1.ServiceImport {
	return newImport("web", []string{vip, "fd00:243::10"}, []mcsv1beta1.ServicePort{tcpPort("http", 80), udpPort("dns", 53)}, opts...)
}

// webSlices are web's endpoints: two in each cluster, both exporting http
// on 80 and dns on 53.
func webSlices() []any {
	return []any{
		newSlice("web", localCluster, []slicePort{tcp("http", 80, 8080), udp("dns", 53, 5353)}, ready("10.1.0.1"), ready("10.1.0.2")),
		newSlice("web", remoteCluster, []slicePort{tcp("http", 80, 8080), udp("dns", 53, 5353)}, ready("10.2.0.1"), ready("10.2.0.2")),
	}
}

// TestGoldenRulesets compares the rules of a few shapes with the files
// under testdata/: the nftables table as the Fake dumps it (<name>.nft) and,
// in iptables mode, the first sync's iptables-restore input
// (iptables-<name>.restore).
func TestGoldenRulesets(t *testing.T) {
	for _, c := range []struct {
		test, name string
		family     v1.IPFamily
		edit       func(*Config)
		objects    []any
	}{
		{"two clusters, TCP and UDP, no affinity", "basic", v1.IPv4Protocol, nil, append(webSlices(), webImport())},
		{"ClientIP session affinity", "affinity", v1.IPv4Protocol, nil, append(webSlices(), webImport(withAffinity(60)))},
		{"no endpoints, and internalTrafficPolicy Local without local endpoints", "no-endpoints", v1.IPv4Protocol, nil, []any{
			newImport("empty", []string{"243.1.0.20"}, []mcsv1beta1.ServicePort{tcpPort("http", 80)}),
			newImport("local", []string{"243.1.0.21"}, []mcsv1beta1.ServicePort{tcpPort("http", 80)},
				withInternalTrafficPolicy(v1.ServiceInternalTrafficPolicyLocal)),
			newSlice("local", remoteCluster, []slicePort{tcp("http", 80, 8080)}, ready("10.2.0.1")),
		}},
		{"masquerade all", "masquerade-all", v1.IPv4Protocol, func(c *Config) { c.MasqueradeAll = true; c.MasqueradeMark = 0x4000 },
			append(webSlices(), webImport())},
		{"IPv6", "ipv6", v1.IPv6Protocol, nil, []any{webImport(withAffinity(30)),
			newSlice("web", localCluster, []slicePort{tcp("http", 80, 8080)}, ready("fd00:1::1")),
			newSlice("web", remoteCluster, []slicePort{tcp("http", 80, 8080)}, ready("fd00:2::1")),
		}},
	} {
		for _, mode := range []Mode{ModeNFTables, ModeIPTables} {
			t.Run(c.test+"/"+string(mode), func(t *testing.T) {
				f := newFixture(t, c.family, func(cfg *Config) {
					cfg.Mode = mode
					if c.edit != nil {
						c.edit(cfg)
					}
				})
				f.start(c.objects...)
				if mode == ModeIPTables {
					f.assertRestoreGolden("iptables-" + c.name)
				} else {
					f.assertGolden(c.name)
				}
			})
		}
	}
}

func TestBalancing(t *testing.T) {
	inEachMode(t, func(t *testing.T, mode Mode, newFixture fixtureFunc) {
		t.Run("a ClusterSetIP port reaches the ready endpoints of every cluster", func(t *testing.T) {
			f := newFixture(t, v1.IPv4Protocol)
			f.start(append(webSlices(), webImport())...)
			got := endpoints(t, f.trace(pkt(podClient, vip, "tcp", 80)))
			want := []string{"10.1.0.1:8080", "10.1.0.2:8080", "10.2.0.1:8080", "10.2.0.2:8080"}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("TCP endpoints (-want +got):\n%s", diff)
			}
			got = endpoints(t, f.trace(pkt(podClient, vip, "udp", 53)))
			want = []string{"10.1.0.1:5353", "10.1.0.2:5353", "10.2.0.1:5353", "10.2.0.2:5353"}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("UDP endpoints (-want +got):\n%s", diff)
			}
		})
		t.Run("a cluster that exports the port name on another number gets none of its traffic", func(t *testing.T) {
			f := newFixture(t, v1.IPv4Protocol)
			f.start(webImport(),
				newSlice("web", localCluster, []slicePort{tcp("http", 80, 8080)}, ready("10.1.0.1")),
				newSlice("web", remoteCluster, []slicePort{tcp("http", 8080, 8080)}, ready("10.2.0.1")),
			)
			got := endpoints(t, f.trace(pkt(podClient, vip, "tcp", 80)))
			if diff := cmp.Diff([]string{"10.1.0.1:8080"}, got); diff != "" {
				t.Errorf("endpoints (-want +got):\n%s", diff)
			}
		})
		t.Run("a cluster that does not export a port gets none of its traffic", func(t *testing.T) {
			f := newFixture(t, v1.IPv4Protocol)
			f.start(webImport(),
				newSlice("web", localCluster, []slicePort{tcp("http", 80, 8080), udp("dns", 53, 5353)}, ready("10.1.0.1")),
				newSlice("web", remoteCluster, []slicePort{tcp("http", 80, 8080)}, ready("10.2.0.1")),
			)
			got := endpoints(t, f.trace(pkt(podClient, vip, "udp", 53)))
			if diff := cmp.Diff([]string{"10.1.0.1:5353"}, got); diff != "" {
				t.Errorf("endpoints (-want +got):\n%s", diff)
			}
		})
		t.Run("a slice without the service-ports annotation serves the ports it names", func(t *testing.T) {
			f := newFixture(t, v1.IPv4Protocol)
			f.start(webImport(),
				withoutAnnotation(newSlice("web", remoteCluster, []slicePort{tcp("http", 0, 9090)}, ready("10.2.0.1"))),
			)
			got := endpoints(t, f.trace(pkt(podClient, vip, "tcp", 80)))
			if diff := cmp.Diff([]string{"10.2.0.1:9090"}, got); diff != "" {
				t.Errorf("endpoints (-want +got):\n%s", diff)
			}
		})
		t.Run("a slice with an invalid service-ports annotation serves nothing", func(t *testing.T) {
			f := newFixture(t, v1.IPv4Protocol)
			bad := newSlice("web", remoteCluster, []slicePort{tcp("http", 80, 8080)}, ready("10.2.0.1"))
			bad.Annotations[mcsslice.ServicePortsAnnotation] = `{"http":80}`
			f.start(webImport(), bad)
			if got := verdicts(f.trace(pkt(podClient, vip, "tcp", 80))); !slices.Equal(got, []string{"reject"}) {
				t.Errorf("verdicts %v, want reject", got)
			}
		})
		t.Run("an endpoint listed in two slices counts once", func(t *testing.T) {
			f := newFixture(t, v1.IPv4Protocol)
			f.start(webImport(),
				named(newSlice("web", remoteCluster, []slicePort{tcp("http", 80, 8080)}, ready("10.2.0.1")), "a"),
				named(newSlice("web", remoteCluster, []slicePort{tcp("http", 80, 8080)}, ready("10.2.0.1"), ready("10.2.0.2")), "b"),
			)
			outs := f.trace(pkt(podClient, vip, "tcp", 80))
			if len(outs) != 2 {
				t.Errorf("%d numgen branches, want 2: %v", len(outs), outs)
			}
		})
		t.Run("traffic to a port the ClusterSetIP does not have is rejected", func(t *testing.T) {
			f := newFixture(t, v1.IPv4Protocol)
			f.start(append(webSlices(), webImport())...)
			for _, p := range []packet{pkt(podClient, vip, "tcp", 81), pkt(podClient, vip, "udp", 80), pkt(podClient, vip, "icmp", 0)} {
				if got := verdicts(f.trace(p)); !slices.Equal(got, []string{"reject"}) {
					t.Errorf("%s/%d: verdicts %v, want reject", p.proto, p.dport, got)
				}
			}
		})
		t.Run("traffic to other addresses is left alone", func(t *testing.T) {
			f := newFixture(t, v1.IPv4Protocol)
			f.start(append(webSlices(), webImport())...)
			outs := f.trace(pkt(podClient, "10.2.0.1", "tcp", 8080))
			if got := verdicts(outs); !slices.Equal(got, []string{"accept"}) || outs[0].masquerade {
				t.Errorf("outcomes %v, want accepted untouched", outs)
			}
		})
		t.Run("a headless import or one without a VIP of the family programs nothing", func(t *testing.T) {
			if mode != ModeNFTables {
				t.Skip("inspects the nftables table")
			}
			f := newFixture(t, v1.IPv4Protocol)
			headless := newImport("headless", nil, []mcsv1beta1.ServicePort{tcpPort("http", 80)})
			headless.Spec.Type = mcsv1beta1.Headless
			f.start(headless, newImport("v6only", []string{"fd00:243::30"}, []mcsv1beta1.ServicePort{tcpPort("http", 80)}),
				newSlice("headless", localCluster, []slicePort{tcp("http", 80, 8080)}, ready("10.1.0.1")))
			if n := len(f.nft.Table.Maps[serviceIPsMap].Elements) + len(f.nft.Table.Sets[clustersetIPsSet].Elements); n != 0 {
				t.Errorf("%d elements programmed, want none", n)
			}
		})
	})
}

func TestReadiness(t *testing.T) {
	inEachMode(t, func(t *testing.T, mode Mode, newFixture fixtureFunc) {
		cases := []struct {
			name string
			eps  []discoveryv1.Endpoint
			want []string
		}{
			{"only ready endpoints get traffic",
				[]discoveryv1.Endpoint{ready("10.2.0.1"), notReady("10.2.0.2"), terminating("10.2.0.3", true)},
				[]string{"10.2.0.1:8080"}},
			{"serving terminating endpoints get traffic when none is ready",
				[]discoveryv1.Endpoint{notReady("10.2.0.2"), terminating("10.2.0.3", true), terminating("10.2.0.4", false)},
				[]string{"10.2.0.3:8080"}},
			{"an endpoint without conditions is ready",
				[]discoveryv1.Endpoint{{Addresses: []string{"10.2.0.5"}}},
				[]string{"10.2.0.5:8080"}},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				f := newFixture(t, v1.IPv4Protocol)
				f.start(webImport(), newSlice("web", remoteCluster, []slicePort{tcp("http", 80, 8080)}, c.eps...))
				if diff := cmp.Diff(c.want, endpoints(t, f.trace(pkt(podClient, vip, "tcp", 80)))); diff != "" {
					t.Errorf("endpoints (-want +got):\n%s", diff)
				}
			})
		}
		t.Run("endpoints neither ready nor serving-and-terminating mean no endpoints: reject", func(t *testing.T) {
			f := newFixture(t, v1.IPv4Protocol)
			f.start(webImport(), newSlice("web", remoteCluster, []slicePort{tcp("http", 80, 8080)}, notReady("10.2.0.2"), terminating("10.2.0.4", false)))
			if got := verdicts(f.trace(pkt(podClient, vip, "tcp", 80))); !slices.Equal(got, []string{"reject"}) {
				t.Errorf("verdicts %v, want reject", got)
			}
		})
		t.Run("a ready endpoint elsewhere is preferred to a terminating local one, even with PreferClose", func(t *testing.T) {
			f := newFixture(t, v1.IPv4Protocol)
			f.start(webImport(withTrafficDistribution(v1.ServiceTrafficDistributionPreferClose)),
				newSlice("web", localCluster, []slicePort{tcp("http", 80, 8080)}, terminating("10.1.0.1", true)),
				newSlice("web", remoteCluster, []slicePort{tcp("http", 80, 8080)}, ready("10.2.0.1")))
			if diff := cmp.Diff([]string{"10.2.0.1:8080"}, endpoints(t, f.trace(pkt(podClient, vip, "tcp", 80)))); diff != "" {
				t.Errorf("endpoints (-want +got):\n%s", diff)
			}
		})
	})
}

func TestNoEndpoints(t *testing.T) {
	t.Run("an import without endpoints rejects at once, TCP and UDP", func(t *testing.T) {
		f := newFixture(t, v1.IPv4Protocol)
		f.start(webImport())
		for _, p := range []packet{pkt(podClient, vip, "tcp", 80), pkt(podClient, vip, "udp", 53)} {
			outs := f.tracer().trace(p)
			if got := verdicts(outs); !slices.Equal(got, []string{"reject"}) {
				t.Errorf("%s: verdicts %v, want reject", p.proto, got)
			}
			if !slices.ContainsFunc(outs[0].trail, func(r string) bool { return strings.HasPrefix(r, endpointsCheckChain) }) {
				t.Errorf("%s: rejected, but not by the no-endpoints check:\n%s", p.proto, strings.Join(outs[0].trail, "\n"))
			}
		}
		p := pkt(podClient, vip, "tcp", 80)
		p.fromHost = true
		if got := verdicts(f.tracer().trace(p)); !slices.Equal(got, []string{"reject"}) {
			t.Errorf("from the host: verdicts %v, want reject", got)
		}
	})
	t.Run("endpoints going away turn the port into a reject, and coming back undo it", func(t *testing.T) {
		f := newFixture(t, v1.IPv4Protocol)
		slices := webSlices()
		f.start(append(slices, webImport())...)
		f.p.OnEndpointSliceDelete(slices[0].(*discoveryv1.EndpointSlice))
		f.p.OnEndpointSliceDelete(slices[1].(*discoveryv1.EndpointSlice))
		f.sync()
		if got := verdicts(f.tracer().trace(pkt(podClient, vip, "tcp", 80))); len(got) != 1 || got[0] != "reject" {
			t.Errorf("without endpoints: verdicts %v, want reject", got)
		}
		f.add(slices...)
		f.sync()
		if got := endpoints(t, f.tracer().trace(pkt(podClient, vip, "tcp", 80))); len(got) != 4 {
			t.Errorf("endpoints back: %v", got)
		}
		f.assertGolden("basic")
	})
}

func TestTrafficPolicies(t *testing.T) {
	inEachMode(t, func(t *testing.T, mode Mode, newFixture fixtureFunc) {
		local := newSlice("web", localCluster, []slicePort{tcp("http", 80, 8080)}, onNode(ready("10.1.0.1"), thisNode), onNode(ready("10.1.0.2"), "node-b"))
		remote := newSlice("web", remoteCluster, []slicePort{tcp("http", 80, 8080)}, onNode(ready("10.2.0.1"), thisNode))
		trace := func(f *fixture) []outcome { return f.trace(pkt(podClient, vip, "tcp", 80)) }

		t.Run("PreferClose sends traffic to the local cluster only", func(t *testing.T) {
			f := newFixture(t, v1.IPv4Protocol)
			f.start(webImport(withTrafficDistribution(v1.ServiceTrafficDistributionPreferClose)), local, remote)
			if diff := cmp.Diff([]string{"10.1.0.1:8080", "10.1.0.2:8080"}, endpoints(t, trace(f))); diff != "" {
				t.Errorf("endpoints (-want +got):\n%s", diff)
			}
		})
		t.Run("PreferClose fails over to other clusters when the local endpoints go", func(t *testing.T) {
			f := newFixture(t, v1.IPv4Protocol)
			f.start(webImport(withTrafficDistribution(v1.ServiceTrafficDistributionPreferSameZone)), local, remote)
			down := newSlice("web", localCluster, []slicePort{tcp("http", 80, 8080)}, notReady("10.1.0.1"), notReady("10.1.0.2"))
			f.p.OnEndpointSliceUpdate(local, down)
			f.sync()
			if diff := cmp.Diff([]string{"10.2.0.1:8080"}, endpoints(t, trace(f))); diff != "" {
				t.Errorf("endpoints (-want +got):\n%s", diff)
			}
			f.p.OnEndpointSliceUpdate(down, local)
			f.sync()
			if diff := cmp.Diff([]string{"10.1.0.1:8080", "10.1.0.2:8080"}, endpoints(t, trace(f))); diff != "" {
				t.Errorf("after recovery (-want +got):\n%s", diff)
			}
		})
		t.Run("the PreferLocalCluster setting applies PreferClose to every import", func(t *testing.T) {
			f := newFixture(t, v1.IPv4Protocol, func(c *Config) { c.PreferLocalCluster = true })
			f.start(webImport(), local, remote)
			if diff := cmp.Diff([]string{"10.1.0.1:8080", "10.1.0.2:8080"}, endpoints(t, trace(f))); diff != "" {
				t.Errorf("endpoints (-want +got):\n%s", diff)
			}
		})
		t.Run("an unknown trafficDistribution is no preference", func(t *testing.T) {
			f := newFixture(t, v1.IPv4Protocol)
			f.start(webImport(withTrafficDistribution("Anywhere")), local, remote)
			if got := endpoints(t, trace(f)); len(got) != 3 {
				t.Errorf("endpoints %v, want all three", got)
			}
		})
		t.Run("internalTrafficPolicy Local uses the local cluster's endpoints", func(t *testing.T) {
			f := newFixture(t, v1.IPv4Protocol)
			f.start(webImport(withInternalTrafficPolicy(v1.ServiceInternalTrafficPolicyLocal)), local, remote)
			if diff := cmp.Diff([]string{"10.1.0.1:8080", "10.1.0.2:8080"}, endpoints(t, trace(f))); diff != "" {
				t.Errorf("endpoints (-want +got):\n%s", diff)
			}
		})
		t.Run("internalTrafficPolicy Local with a node name uses this node's endpoints of the local cluster", func(t *testing.T) {
			f := newFixture(t, v1.IPv4Protocol, func(c *Config) { c.NodeName = thisNode })
			f.start(webImport(withInternalTrafficPolicy(v1.ServiceInternalTrafficPolicyLocal)), local, remote)
			if diff := cmp.Diff([]string{"10.1.0.1:8080"}, endpoints(t, trace(f))); diff != "" {
				t.Errorf("endpoints (-want +got):\n%s", diff)
			}
		})
		t.Run("internalTrafficPolicy Local drops traffic when only other clusters have endpoints, and rejects when nobody has", func(t *testing.T) {
			f := newFixture(t, v1.IPv4Protocol)
			f.start(webImport(withInternalTrafficPolicy(v1.ServiceInternalTrafficPolicyLocal)), remote)
			if got := verdicts(trace(f)); !slices.Equal(got, []string{"drop"}) {
				t.Errorf("verdicts %v, want drop", got)
			}
			// The no-endpoints verdict changes: the kernel needs a delete
			// before the add (the strict Fake checks it).
			f.p.OnEndpointSliceDelete(remote)
			f.sync()
			if got := verdicts(trace(f)); !slices.Equal(got, []string{"reject"}) {
				t.Errorf("verdicts %v, want reject", got)
			}
			if mode != ModeNFTables {
				return
			}
			tx := f.nft.LastTransaction.String()
			del := strings.Index(tx, "delete element ip mcsd no-endpoint-services { 243.1.0.10 . tcp . 80 }")
			add := strings.Index(tx, "add element ip mcsd no-endpoint-services { 243.1.0.10 . tcp . 80 : goto reject-chain }")
			if del < 0 || add < del {
				t.Errorf("the verdict change is not a delete followed by an add:\n%s", tx)
			}
		})
	})
}

func TestSessionAffinity(t *testing.T) {
	f := newFixture(t, v1.IPv4Protocol)
	f.start(append(webSlices(), webImport(withAffinity(60)))...)
	tr := f.tracer()
	p := pkt(podClient, vip, "tcp", 80)
	outs := tr.trace(p)
	if got := endpoints(t, outs); len(got) != 4 {
		t.Fatalf("a new client can reach %v, want all four endpoints", got)
	}
	for _, o := range outs {
		if !strings.HasPrefix(o.affinity, podClient.String()+" . "+vip+" . tcp . 80 . ") {
			t.Fatalf("path to %s records %q, want the client and the service port", o.endpoint, o.affinity)
		}
	}
	remembered := outs[2]
	tr.remember(remembered)
	if diff := cmp.Diff([]string{remembered.endpoint}, endpoints(t, tr.trace(p))); diff != "" {
		t.Errorf("a remembered client goes elsewhere (-want +got):\n%s", diff)
	}
	other := pkt(netip.MustParseAddr("10.1.9.10"), vip, "tcp", 80)
	if got := endpoints(t, tr.trace(other)); len(got) != 4 {
		t.Errorf("another client can reach %v, want all four", got)
	}
	if got := endpoints(t, tr.trace(pkt(podClient, vip, "udp", 53))); len(got) != 4 {
		t.Errorf("the remembered client's other port reaches %v, want all four", got)
	}
	if !strings.Contains(f.nft.Dump(), " timeout 60s }") {
		t.Errorf("no rule records clients with the 60 s timeout:\n%s", f.nft.Dump())
	}

	t.Run("a new timeout keeps the clients and records with the new one", func(t *testing.T) {
		f.p.OnServiceImportUpdate(webImport(withAffinity(60)), webImport(withAffinity(120)))
		f.sync()
		outs := tr.trace(p)
		if diff := cmp.Diff([]string{remembered.endpoint}, endpoints(t, outs)); diff != "" {
			t.Errorf("a remembered client goes elsewhere (-want +got):\n%s", diff)
		}
		if !strings.Contains(strings.Join(outs[0].trail, "\n"), "timeout 120s") {
			t.Errorf("the client is recorded by %v, want the 120 s timeout", outs[0].trail)
		}
	})
	t.Run("a client of a removed endpoint is balanced again; others keep theirs", func(t *testing.T) {
		tr.forget()
		var gone, kept outcome
		for _, o := range tr.trace(p) {
			switch o.endpoint {
			case "10.2.0.2:8080":
				gone = o
			case "10.1.0.1:8080":
				kept = o
			}
		}
		tr.remember(gone)
		tr.remember(outcome{affinity: strings.Replace(kept.affinity, podClient.String(), other.src.String(), 1)})
		f.p.OnEndpointSliceUpdate(nil, newSlice("web", remoteCluster, []slicePort{tcp("http", 80, 8080), udp("dns", 53, 5353)}, ready("10.2.0.1")))
		f.sync()
		if got := endpoints(t, tr.trace(p)); len(got) != 3 || slices.Contains(got, "10.2.0.2:8080") {
			t.Errorf("the removed endpoint's client reaches %v, want the three left", got)
		}
		if diff := cmp.Diff([]string{"10.1.0.1:8080"}, endpoints(t, tr.trace(other))); diff != "" {
			t.Errorf("another client lost its endpoint (-want +got):\n%s", diff)
		}
	})
	t.Run("turning affinity off deletes the affinity chains", func(t *testing.T) {
		f.p.OnServiceImportUpdate(webImport(withAffinity(120)), webImport())
		f.sync()
		f.clock.Step(staleChainDelay)
		f.sync()
		for name := range f.nft.Table.Chains {
			if strings.Contains(name, affinityChainInfix) {
				t.Errorf("chain %s is still there", name)
			}
		}
		outs := tr.trace(p)
		if got := endpoints(t, outs); len(got) != 3 {
			t.Errorf("endpoints %v, want the three left", got)
		}
		for _, o := range outs {
			if o.affinity != "" {
				t.Errorf("path to %s still records the client", o.endpoint)
			}
		}
	})
}

func TestMasquerade(t *testing.T) {
	inEachMode(t, func(t *testing.T, mode Mode, newFixture fixtureFunc) {
		t.Run("pod traffic keeps its source; other sources and the host are masqueraded", func(t *testing.T) {
			f := newFixture(t, v1.IPv4Protocol)
			f.start(append(webSlices(), webImport())...)
			check := func(name string, p packet, want bool) {
				for _, o := range f.trace(p) {
					if o.verdict != "dnat" || o.masquerade != want {
						t.Errorf("%s: outcome %v, want DNAT with masquerade=%v", name, o, want)
					}
				}
			}
			check("from a pod", pkt(podClient, vip, "tcp", 80), false)
			check("from another host", pkt(hostClient, vip, "tcp", 80), true)
			fromHost := pkt(hostClient, vip, "tcp", 80)
			fromHost.fromHost = true
			check("from the node", fromHost, true)
		})
		t.Run("an endpoint reaching itself through the ClusterSetIP is masqueraded", func(t *testing.T) {
			f := newFixture(t, v1.IPv4Protocol)
			f.start(append(webSlices(), webImport())...)
			self := netip.MustParseAddr("10.1.0.1")
			for _, o := range f.trace(pkt(self, vip, "tcp", 80)) {
				if want := o.endpoint == "10.1.0.1:8080"; o.masquerade != want {
					t.Errorf("to %s: masquerade=%v, want %v", o.endpoint, o.masquerade, want)
				}
			}
		})
		t.Run("with a node name, only this node's endpoints are hairpin candidates", func(t *testing.T) {
			if mode != ModeNFTables {
				t.Skip("inspects the nftables table")
			}
			f := newFixture(t, v1.IPv4Protocol, func(c *Config) { c.NodeName = thisNode })
			f.start(webImport(),
				newSlice("web", localCluster, []slicePort{tcp("http", 80, 8080)}, onNode(ready("10.1.0.1"), thisNode), onNode(ready("10.1.0.2"), "node-b")))
			var hairpin []string
			for _, e := range f.nft.Table.Sets[hairpinConnectionsSet].Elements {
				hairpin = append(hairpin, strings.Join(e.Key, " . "))
			}
			if diff := cmp.Diff([]string{"10.1.0.1 . 10.1.0.1 . tcp . 8080"}, hairpin); diff != "" {
				t.Errorf("hairpin-connections (-want +got):\n%s", diff)
			}
			for _, o := range f.trace(pkt(netip.MustParseAddr("10.1.0.1"), vip, "tcp", 80)) {
				if want := o.endpoint == "10.1.0.1:8080"; o.masquerade != want {
					t.Errorf("to %s: masquerade=%v, want %v", o.endpoint, o.masquerade, want)
				}
			}
		})
		t.Run("MasqueradeAll masquerades pod traffic too", func(t *testing.T) {
			f := newFixture(t, v1.IPv4Protocol, func(c *Config) { c.MasqueradeAll = true })
			f.start(append(webSlices(), webImport())...)
			for _, o := range f.trace(pkt(podClient, vip, "tcp", 80)) {
				if !o.masquerade {
					t.Errorf("outcome %v not masqueraded", o)
				}
			}
		})
		t.Run("without pod CIDRs only hairpin traffic is masqueraded", func(t *testing.T) {
			f := newFixture(t, v1.IPv4Protocol, func(c *Config) { c.PodCIDRs = nil })
			f.start(append(webSlices(), webImport())...)
			for _, o := range f.trace(pkt(hostClient, vip, "tcp", 80)) {
				if o.masquerade {
					t.Errorf("outcome %v masqueraded", o)
				}
			}
		})
	})
}

func TestPartialSync(t *testing.T) {
	other := newImport("other", []string{"243.1.0.11"}, []mcsv1beta1.ServicePort{tcpPort("http", 80)})
	otherSlice := newSlice("other", remoteCluster, []slicePort{tcp("http", 80, 8080)}, ready("10.2.0.9"))
	setup := func(t *testing.T) *fixture {
		f := newFixture(t, v1.IPv4Protocol)
		f.start(append(webSlices(), webImport(), other, otherSlice)...)
		return f
	}

	t.Run("an endpoint change writes only that service's changed elements", func(t *testing.T) {
		f := setup(t)
		s := newSlice("web", remoteCluster, []slicePort{tcp("http", 80, 8080), udp("dns", 53, 5353)}, ready("10.2.0.1"))
		f.p.OnEndpointSliceUpdate(nil, s)
		f.sync()
		tx := f.nft.LastTransaction.String()
		for _, want := range []string{
			"delete element ip mcsd backends-tcp { 243.1.0.10 . 80 . 3 }",
			"add element ip mcsd service-ips { 243.1.0.10 . tcp . 80 : goto lb-tcp-3 }",
		} {
			if !strings.Contains(tx, want) {
				t.Errorf("transaction lacks %q:\n%s", want, tx)
			}
		}
		// Endpoints that stay keep their index: nothing about them is
		// written.
		for _, unwanted := range []string{"10.1.0.1", "10.1.0.2", "10.2.0.1", "243.1.0.11", "add table", "flush map", "flush set", "filter-"} {
			if strings.Contains(tx, unwanted) {
				t.Errorf("partial sync touches %q:\n%s", unwanted, tx)
			}
		}
		if got := endpoints(t, f.tracer().trace(pkt(podClient, vip, "tcp", 80))); len(got) != 3 {
			t.Errorf("endpoints %v, want three", got)
		}
	})
	t.Run("an update that changes nothing the proxier uses syncs nothing", func(t *testing.T) {
		f := setup(t)
		runs := f.nft.runs
		s := otherSlice.DeepCopy()
		s.ResourceVersion = "2"
		s.Labels["unrelated"] = "x"
		if f.p.tracker.sliceUpdate(s, false) {
			t.Error("an irrelevant slice update is reported as a change")
		}
		f.sync()
		if f.nft.runs != runs {
			t.Errorf("%d transactions ran for no change", f.nft.runs-runs)
		}
	})
	t.Run("a change undone before the sync syncs nothing", func(t *testing.T) {
		f := setup(t)
		changed := newImport("other", []string{"243.1.0.11"}, []mcsv1beta1.ServicePort{tcpPort("http", 81)})
		f.p.OnServiceImportUpdate(other, changed)
		f.p.OnServiceImportUpdate(changed, other)
		runs := f.nft.runs
		f.sync()
		if f.nft.runs != runs {
			t.Errorf("%d transactions ran for an undone change", f.nft.runs-runs)
		}
	})
	t.Run("syncs after the first never list the ruleset", func(t *testing.T) {
		f := setup(t)
		lists := f.nft.listCalls()
		f.p.OnServiceImportDelete(other)
		f.sync()
		f.clock.Step(staleChainDelay)
		f.sync()
		f.fullSync()
		if n := f.nft.listCalls() - lists; n != 0 {
			t.Errorf("%d list calls after the first sync", n)
		}
	})
	t.Run("a shared chain whose last user goes is flushed, then deleted a moment later", func(t *testing.T) {
		f := setup(t)
		chain := lbChainName("tcp", 1, 0)
		f.p.OnServiceImportDelete(other)
		f.p.OnEndpointSliceDelete(otherSlice)
		f.sync()
		c := f.nft.Table.Chains[chain]
		if c == nil || len(c.Rules) != 0 {
			t.Fatalf("chain %s after the delete: %+v, want present and empty", chain, c)
		}
		f.sync()
		if f.nft.Table.Chains[chain] == nil {
			t.Fatalf("chain %s deleted at once", chain)
		}
		f.clock.Step(staleChainDelay)
		f.sync()
		if f.nft.Table.Chains[chain] != nil {
			t.Errorf("chain %s still there a second later", chain)
		}
		if got := verdicts(f.tracer().trace(pkt(podClient, "243.1.0.11", "tcp", 80))); !slices.Equal(got, []string{"accept"}) {
			t.Errorf("traffic to the removed ClusterSetIP: %v, want untouched", got)
		}
	})
	t.Run("a chain that comes back before its deletion is rewritten, not deleted", func(t *testing.T) {
		f := setup(t)
		f.p.OnEndpointSliceDelete(otherSlice)
		f.sync()
		f.p.OnEndpointSliceAdd(otherSlice)
		f.clock.Step(staleChainDelay)
		f.sync()
		if got := endpoints(t, f.tracer().trace(pkt(podClient, "243.1.0.11", "tcp", 80))); len(got) != 1 {
			t.Errorf("endpoints %v", got)
		}
	})
	t.Run("a ClusterSetIP moves to another import with a delete and an add", func(t *testing.T) {
		f := setup(t)
		younger := newImport("younger", []string{vip}, []mcsv1beta1.ServicePort{tcpPort("http", 80)}, createdAt(epoch.Add(1)))
		f.add(younger, newSlice("younger", remoteCluster, []slicePort{tcp("http", 80, 8080)}, ready("10.2.0.7")))
		f.sync()
		if got := endpoints(t, f.tracer().trace(pkt(podClient, vip, "tcp", 80))); len(got) != 4 {
			t.Errorf("the older import lost its ClusterSetIP: %v", got)
		}
		f.p.OnServiceImportDelete(webImport())
		f.sync()
		if diff := cmp.Diff([]string{"10.2.0.7:8080"}, endpoints(t, f.tracer().trace(pkt(podClient, vip, "tcp", 80)))); diff != "" {
			t.Errorf("endpoints (-want +got):\n%s", diff)
		}
		tx := f.nft.LastTransaction.String()
		if !strings.Contains(tx, "delete element ip mcsd service-ips { 243.1.0.10 . tcp . 80 }") {
			t.Errorf("value change without a delete:\n%s", tx)
		}
	})
}

func TestFullSync(t *testing.T) {
	t.Run("a periodic resync restores a table flushed by hand", func(t *testing.T) {
		f := newFixture(t, v1.IPv4Protocol)
		f.start(append(webSlices(), webImport())...)
		// What "nft flush table ip mcsd" does: every chain loses its
		// rules; chains, sets, maps and their elements stay.
		f.nft.Lock()
		for _, c := range f.nft.Table.Chains {
			c.Rules = nil
		}
		f.nft.Unlock()
		if got := verdicts(f.tracer().trace(pkt(podClient, vip, "tcp", 80))); !slices.Equal(got, []string{"accept"}) {
			t.Fatalf("verdicts %v with the rules flushed", got)
		}
		f.fullSync()
		f.assertGolden("basic")
	})
	t.Run("a periodic resync of an intact table writes nothing", func(t *testing.T) {
		f := newFixture(t, v1.IPv4Protocol)
		f.start(append(webSlices(), webImport())...)
		runs := f.nft.runs
		f.fullSync()
		if f.nft.runs != runs {
			t.Errorf("resync of an intact table ran a transaction:\n%s", f.nft.LastTransaction)
		}
	})
	t.Run("a periodic resync rewrites only the chains whose rules changed", func(t *testing.T) {
		f := newFixture(t, v1.IPv4Protocol)
		f.start(append(webSlices(), webImport())...)
		f.nft.Lock()
		f.nft.Table.Chains["lb-tcp-4"].Rules = nil
		f.nft.Unlock()
		f.fullSync()
		tx := f.nft.LastTransaction.String()
		if !strings.Contains(tx, "flush chain ip mcsd lb-tcp-4") {
			t.Errorf("the emptied chain is not rewritten:\n%s", tx)
		}
		for _, unwanted := range []string{"delete table", "element", "services", "lb-udp-4"} {
			if strings.Contains(tx, unwanted) {
				t.Errorf("resync touches %q:\n%s", unwanted, tx)
			}
		}
		f.assertGolden("basic")
	})
	t.Run("a table flushed by hand is rewritten at the next table check, without listing", func(t *testing.T) {
		f := newFixture(t, v1.IPv4Protocol)
		f.start(append(webSlices(), webImport())...)
		f.nft.Lock()
		for _, c := range f.nft.Table.Chains {
			c.Rules = nil
		}
		f.nft.Unlock()
		f.sync()
		if got := verdicts(f.tracer().trace(pkt(podClient, vip, "tcp", 80))); !slices.Equal(got, []string{"accept"}) {
			t.Fatalf("a sync within the sync period checked the table: verdicts %v", got)
		}
		f.clock.Step(DefaultSyncPeriod)
		f.sync()
		f.assertGolden("basic")
		if n := f.nft.listCalls(); n != 0 {
			t.Errorf("%d list calls to notice and repair the flush, want none", n)
		}
	})
	t.Run("a RuleCounter, when given, is asked instead of listing the chain", func(t *testing.T) {
		counter := &fakeRuleCounter{rules: 1}
		f := newFixture(t, v1.IPv4Protocol, func(c *Config) { c.RuleCounter = counter })
		f.start(append(webSlices(), webImport())...)
		lists := f.nft.listCalls()
		f.clock.Step(DefaultSyncPeriod)
		f.sync()
		if counter.asked != 1 || f.nft.listCalls() != lists {
			t.Fatalf("counter asked %d times and %d nft listings: want 1 and 0", counter.asked, f.nft.listCalls()-lists)
		}
		f.nft.Lock()
		for _, c := range f.nft.Table.Chains {
			c.Rules = nil
		}
		f.nft.Unlock()
		counter.rules = 0
		f.clock.Step(DefaultSyncPeriod)
		f.sync()
		f.assertGolden("basic")
		counter.err = fmt.Errorf("chain gone: %w", netfilter.ErrNotFound)
		f.clock.Step(DefaultSyncPeriod)
		f.sync()
		if counter.asked != 3 || f.p.needRewrite {
			t.Fatalf("counter asked %d times; a missing chain must trigger a full sync at once", counter.asked)
		}
	})
	t.Run("a table deleted by hand is rewritten at the next periodic sync", func(t *testing.T) {
		f := newFixture(t, v1.IPv4Protocol)
		f.start(append(webSlices(), webImport())...)
		tx := f.nft.NewTransaction()
		tx.Delete(&knftables.Table{})
		if err := f.nft.Fake.Run(t.Context(), tx); err != nil {
			t.Fatal(err)
		}
		f.clock.Step(DefaultSyncPeriod)
		f.sync()
		f.assertGolden("basic")
	})
	t.Run("a full sync restores a table deleted by hand", func(t *testing.T) {
		f := newFixture(t, v1.IPv4Protocol)
		f.start(append(webSlices(), webImport())...)
		tx := f.nft.NewTransaction()
		tx.Delete(&knftables.Table{})
		if err := f.nft.Fake.Run(t.Context(), tx); err != nil {
			t.Fatal(err)
		}
		f.fullSync()
		f.assertGolden("basic")
	})
	t.Run("the first sync deletes leftovers of an earlier run", func(t *testing.T) {
		f := newFixture(t, v1.IPv4Protocol)
		left := f.nft.NewTransaction()
		left.Add(&knftables.Table{Comment: ptr.To("mcsd: ClusterSetIPs of multi-cluster services")})
		left.Add(&knftables.Chain{Name: "service-AAAAAAAA-ns/gone/tcp/80"})
		left.Add(&knftables.Set{Name: "affinity-AAAAAAAA-ns/gone/tcp/80__10.9.9.9/80", Type: "ipv4_addr"})
		left.Add(&knftables.Rule{Chain: "service-AAAAAAAA-ns/gone/tcp/80", Rule: "ip saddr @affinity-AAAAAAAA-ns/gone/tcp/80__10.9.9.9/80 drop"})
		left.Add(&knftables.Map{Name: "old-map", Type: "ipv4_addr : verdict"})
		if err := f.nft.Run(t.Context(), left); err != nil {
			t.Fatal(err)
		}
		f.start(append(webSlices(), webImport())...)
		if f.nft.listCalls() != 0 {
			t.Errorf("%d list calls, want none", f.nft.listCalls())
		}
		f.assertGolden("basic")
	})
	t.Run("a failed sync is followed by a full one", func(t *testing.T) {
		f := newFixture(t, v1.IPv4Protocol)
		f.start(append(webSlices(), webImport())...)
		failing := &failingNFT{Interface: f.nft, fail: true}
		f.setNFT(failing)
		var reported []error
		f.p.syncFailed = func(family v1.IPFamily, err error) {
			if family != v1.IPv4Protocol {
				t.Errorf("failure reported for %s", family)
			}
			reported = append(reported, err)
		}
		f.p.OnServiceImportDelete(webImport())
		if err := f.p.syncRules(); err == nil {
			t.Fatal("sync succeeded")
		}
		if len(reported) != 1 || !strings.Contains(reported[0].Error(), "simulated failure") {
			t.Errorf("SyncFailed told %v, want the failed transaction's error once", reported)
		}
		failing.fail = false
		f.sync()
		if !strings.Contains(f.nft.LastTransaction.String(), "delete table") {
			t.Error("the sync after a failure does not rewrite the table")
		}
		if got := verdicts(f.tracer().trace(pkt(podClient, vip, "tcp", 80))); !slices.Equal(got, []string{"accept"}) {
			t.Errorf("verdicts %v after the import was deleted", got)
		}
	})
}

// failingNFT fails every transaction while fail is set (only the next one
// with once).
type failingNFT struct {
	knftables.Interface
	fail, once bool
}

func (f *failingNFT) Run(ctx context.Context, tx *knftables.Transaction) error {
	if f.fail {
		f.fail = !f.once
		return errors.New("nft: simulated failure")
	}
	return f.Interface.Run(ctx, tx)
}

func TestConntrack(t *testing.T) {
	inEachMode(t, func(t *testing.T, _ Mode, newFixture fixtureFunc) {
		dns := netfilter.ServicePort{Protocol: v1.ProtocolUDP, Address: netip.MustParseAddrPort("243.1.0.10:53")}
		addrs := func(ips ...string) []netip.Addr {
			var out []netip.Addr
			for _, ip := range ips {
				out = append(out, netip.MustParseAddr(ip))
			}
			return out
		}
		addrCmp := cmp.Comparer(func(a, b netip.Addr) bool { return a == b })
		t.Run("a removed UDP endpoint: entries of the port not to an endpoint left are cleaned", func(t *testing.T) {
			f := newFixture(t, v1.IPv4Protocol)
			f.start(append(webSlices(), webImport())...)
			f.ct.take()
			f.p.OnEndpointSliceUpdate(nil, newSlice("web", remoteCluster, []slicePort{tcp("http", 80, 8080), udp("dns", 53, 5353)}, ready("10.2.0.1")))
			f.sync()
			calls := f.ct.take()
			if len(calls) != 1 {
				t.Fatalf("%d cleanups, want 1", len(calls))
			}
			want := map[netfilter.ServicePort][]netip.Addr{dns: addrs("10.1.0.1", "10.1.0.2", "10.2.0.1")}
			if diff := cmp.Diff(want, calls[0], addrCmp); diff != "" {
				t.Errorf("cleaned (-want +got):\n%s", diff)
			}
		})
		t.Run("a UDP port's first endpoints clean the entries made while it had none", func(t *testing.T) {
			f := newFixture(t, v1.IPv4Protocol)
			f.start(webImport())
			f.ct.take()
			f.add(webSlices()[0])
			f.sync()
			calls := f.ct.take()
			if len(calls) != 1 {
				t.Fatalf("%d cleanups, want 1", len(calls))
			}
			if diff := cmp.Diff(map[netfilter.ServicePort][]netip.Addr{dns: addrs("10.1.0.1", "10.1.0.2")}, calls[0], addrCmp); diff != "" {
				t.Errorf("cleaned (-want +got):\n%s", diff)
			}
		})
		t.Run("a TCP-only change cleans nothing", func(t *testing.T) {
			f := newFixture(t, v1.IPv4Protocol)
			f.start(append(webSlices(), webImport())...)
			f.ct.take()
			f.p.OnEndpointSliceUpdate(nil, newSlice("web", remoteCluster, []slicePort{tcp("http", 80, 8081), udp("dns", 53, 5353)}, ready("10.2.0.1"), ready("10.2.0.2")))
			f.sync()
			if calls := f.ct.take(); len(calls) != 0 {
				t.Errorf("cleaned %v for a TCP change", calls)
			}
		})
		t.Run("a deleted import cleans every entry of its UDP ports", func(t *testing.T) {
			f := newFixture(t, v1.IPv4Protocol)
			f.start(append(webSlices(), webImport())...)
			f.ct.take()
			f.p.OnServiceImportDelete(webImport())
			f.sync()
			calls := f.ct.take()
			if len(calls) != 1 {
				t.Fatalf("%d cleanups, want 1", len(calls))
			}
			if eps, ok := calls[0][dns]; !ok || len(eps) != 0 {
				t.Errorf("cleaned %v, want every entry of %v", calls[0], dns)
			}
		})
		t.Run("of an endpoint in two slices the ready copy counts", func(t *testing.T) {
			f := newFixture(t, v1.IPv4Protocol)
			f.start(webImport(),
				newSlice("web", localCluster, []slicePort{tcp("http", 80, 8080)}, notReady("10.1.0.1")),
				named(newSlice("web", localCluster, []slicePort{tcp("http", 80, 8080)}, ready("10.1.0.1")), "web-moved"))
			if diff := cmp.Diff([]string{"10.1.0.1:8080"}, endpoints(t, f.trace(pkt(podClient, vip, "tcp", 80)))); diff != "" {
				t.Errorf("endpoints (-want +got):\n%s", diff)
			}
		})
	})
}

func TestHandlers(t *testing.T) {
	t.Run("nothing is programmed before both informers have synced", func(t *testing.T) {
		f := newFixture(t, v1.IPv4Protocol)
		f.add(append(webSlices(), webImport())...)
		f.p.OnServiceImportsSynced()
		if f.nft.runs != 0 {
			t.Fatal("synced before EndpointSlices did")
		}
		f.p.OnEndpointSlicesSynced()
		if f.nft.runs != 0 {
			t.Fatal("the informer's goroutine ran the first sync; the sync loop should")
		}
		f.sync()
		f.assertGolden("basic")
	})
	t.Run("a slice that moves to another service leaves the first one", func(t *testing.T) {
		f := newFixture(t, v1.IPv4Protocol)
		other := newImport("other", []string{"243.1.0.11"}, []mcsv1beta1.ServicePort{tcpPort("http", 80)})
		s := newSlice("web", remoteCluster, []slicePort{tcp("http", 80, 8080)}, ready("10.2.0.1"))
		f.start(webImport(), other, s)
		moved := s.DeepCopy()
		moved.Labels[mcsv1beta1.LabelServiceName] = "other"
		f.p.OnEndpointSliceUpdate(s, moved)
		f.sync()
		if got := verdicts(f.tracer().trace(pkt(podClient, vip, "tcp", 80))); !slices.Equal(got, []string{"reject"}) {
			t.Errorf("web: %v, want reject", got)
		}
		if got := endpoints(t, f.tracer().trace(pkt(podClient, "243.1.0.11", "tcp", 80))); len(got) != 1 {
			t.Errorf("other: %v", got)
		}
	})
	t.Run("slices without the service-name label are ignored", func(t *testing.T) {
		f := newFixture(t, v1.IPv4Protocol)
		s := newSlice("web", remoteCluster, []slicePort{tcp("http", 80, 8080)}, ready("10.2.0.1"))
		delete(s.Labels, mcsv1beta1.LabelServiceName)
		s.Labels[discoveryv1.LabelServiceName] = "web"
		f.start(webImport(), s)
		if got := verdicts(f.tracer().trace(pkt(podClient, vip, "tcp", 80))); !slices.Equal(got, []string{"reject"}) {
			t.Errorf("verdicts %v, want reject", got)
		}
	})
}

func TestDualStack(t *testing.T) {
	fake4, fake6 := newStrictFake(t, knftables.IPv4Family), newStrictFake(t, knftables.IPv6Family)
	reg := prometheus.NewRegistry()
	d := fakeDualStack(t, Config{ClusterID: localCluster, Conntrack: &fakeConntrack{}, Registerer: reg},
		func(c *Config) { c.NFTables, c.RuleCounter = fake4, fakeTableCounter{fake4.Fake} },
		func(c *Config) { c.NFTables, c.RuleCounter = fake6, fakeTableCounter{fake6.Fake} })
	d.OnServiceImportAdd(webImport())
	for _, s := range webSlices() {
		d.OnEndpointSliceAdd(s.(*discoveryv1.EndpointSlice))
	}
	d.OnEndpointSliceAdd(newSlice("web", remoteCluster, []slicePort{tcp("http", 80, 8080)}, ready("fd00:2::1")))
	d.OnServiceImportsSynced()
	d.OnEndpointSlicesSynced()
	for _, p := range []*Proxier{d.ipv4, d.ipv6} {
		if err := p.syncRules(); err != nil {
			t.Fatal(err)
		}
	}
	if got := endpoints(t, newTracer(t, fake4.Fake).trace(pkt(podClient, vip, "tcp", 80))); len(got) != 4 {
		t.Errorf("IPv4 endpoints %v", got)
	}
	client6 := netip.MustParseAddr("fd00:1::99")
	if diff := cmp.Diff([]string{"[fd00:2::1]:8080"}, endpoints(t, newTracer(t, fake6.Fake).trace(pkt(client6, "fd00:243::10", "tcp", 80)))); diff != "" {
		t.Errorf("IPv6 endpoints (-want +got):\n%s", diff)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range families {
		if mf.GetName() == "mcsd_proxier_sync_proxy_rules_duration_seconds" && len(mf.GetMetric()) != 2 {
			t.Errorf("sync duration has %d series, want one per family", len(mf.GetMetric()))
		}
	}
}

// fakeRuleCounter says the base chain has rules (or is gone) as told.
type fakeRuleCounter struct {
	rules, asked int
	err          error
}

func (c *fakeRuleCounter) CountRules(v1.IPFamily, string) (int, error) {
	c.asked++
	return c.rules, c.err
}

func TestClusterSetIPsOutsideTheClusterSetCIDRsGetNoRules(t *testing.T) {
	inEachMode(t, func(t *testing.T, mode Mode, newFixture fixtureFunc) {
		f := newFixture(t, v1.IPv4Protocol, func(c *Config) {
			c.ClusterSetCIDRs = []netip.Prefix{netip.MustParsePrefix("243.0.0.0/8"), netip.MustParsePrefix("fd7a:6d63:7364::/48")}
		})
		const metadata = "169.254.169.254"
		forged := webImport(func(si *mcsv1beta1.ServiceImport) {
			si.Name = "forged"
			si.Spec.IPs = []string{metadata}
		})
		f.start(append(webSlices(), webImport(), forged)...)
		if got := endpoints(t, f.trace(pkt(podClient, vip, "tcp", 80))); len(got) != 4 {
			t.Errorf("a ClusterSetIP inside the clusterset CIDRs: endpoints %v, want 4", got)
		}
		// Programmed, the forged import (which has no endpoints) would
		// reject; not programmed, the packet passes untouched.
		if got := verdicts(f.trace(pkt(podClient, metadata, "tcp", 80))); !slices.Equal(got, []string{"accept"}) {
			t.Errorf("a ClusterSetIP outside the clusterset CIDRs was programmed: verdicts %v, want accept", got)
		}
		if n := testutil.ToFloat64(f.p.metrics.vipsRefused.WithLabelValues("IPv4")); n < 1 {
			t.Errorf("refused ClusterSetIPs counted %v times", n)
		}
	})
}
