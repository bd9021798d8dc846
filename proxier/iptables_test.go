package proxier

import (
	"context"
	"math"
	"net/netip"
	"slices"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
)

// newIPTFixture is newFixture in iptables mode.
func newIPTFixture(t *testing.T, family v1.IPFamily, edit ...func(*Config)) *fixture {
	t.Helper()
	return newFixture(t, family, append([]func(*Config){func(c *Config) { c.Mode = ModeIPTables }}, edit...)...)
}

func (f *fixture) iptTracer() *iptTracer { return newIPTTracer(f.t, f.ipt) }

// assertRestoreGolden compares the restore inputs since the last take with
// testdata/<name>.restore.
func (f *fixture) assertRestoreGolden(name string) {
	f.t.Helper()
	restores, _ := f.ipt.take()
	var b strings.Builder
	for _, r := range restores {
		b.WriteString(r.input)
	}
	assertGoldenFile(f.t, name+".restore", b.String())
}

// declared returns the chains a restore input declares.
func declared(input string) []string {
	var chains []string
	for _, line := range strings.Split(input, "\n") {
		if name, ok := strings.CutPrefix(line, ":"); ok {
			chains = append(chains, strings.Fields(name)[0])
		}
	}
	return chains
}

func TestIPTablesBalancing(t *testing.T) {
	f := newIPTFixture(t, v1.IPv4Protocol)
	f.start(append(webSlices(), webImport())...)
	for _, c := range []struct {
		proto string
		port  int
	}{{"tcp", 80}, {"udp", 53}} {
		outs := f.iptTracer().trace(pkt(podClient, vip, c.proto, c.port))
		if got := endpoints(t, outs); len(got) != 4 {
			t.Errorf("%s endpoints %v, want four", c.proto, got)
		}
		for e, share := range shares(outs) {
			if math.Abs(share-0.25) > 1e-6 {
				t.Errorf("%s: %s gets %.4f of new connections, want 0.25", c.proto, e, share)
			}
		}
	}
}

func TestIPTablesSessionAffinity(t *testing.T) {
	f := newIPTFixture(t, v1.IPv4Protocol)
	f.start(append(webSlices(), webImport(withAffinity(60)))...)
	tr := f.iptTracer()
	outs := tr.trace(pkt(podClient, vip, "tcp", 80))
	if len(endpoints(t, outs)) != 4 {
		t.Fatalf("a new client is not balanced over the four endpoints: %v", outs)
	}
	tr.remember(outs[2])
	again := tr.trace(pkt(podClient, vip, "tcp", 80))
	if got := endpoints(t, again); !slices.Equal(got, []string{outs[2].endpoint}) {
		t.Errorf("a remembered client went to %v, want %s", got, outs[2].endpoint)
	}
	other := tr.trace(pkt(netip.MustParseAddr("10.1.9.10"), vip, "tcp", 80))
	if len(endpoints(t, other)) != 4 {
		t.Errorf("another client is not balanced: %v", other)
	}
	for _, rule := range f.ipt.rules(iptablesNAT, iptServiceChain("ns/web/tcp/80")) {
		if (strings.Contains(rule, "--rcheck") || strings.Contains(rule, "--update")) && !strings.Contains(rule, "--seconds 60 --reap") {
			t.Errorf("affinity check without the import's timeout: %s", rule)
		}
	}
}

func TestIPTablesPartialSync(t *testing.T) {
	f := newIPTFixture(t, v1.IPv4Protocol)
	other := newImport("other", []string{"243.1.0.20"}, []mcsv1beta1.ServicePort{tcpPort("http", 80)})
	otherSlice := newSlice("other", remoteCluster, []slicePort{tcp("http", 80, 8080)}, ready("10.2.0.7"))
	f.start(append(webSlices(), webImport(), other, otherSlice)...)
	f.ipt.take()
	webChain, otherChain := iptServiceChain("ns/web/tcp/80"), iptServiceChain("ns/other/tcp/80")
	// An endpoint of this cluster has a chain (it may hairpin); one of
	// another cluster is DNATed to from its service port's chain.
	goneSEP := iptEndpointChain("ns/web/tcp/80", "10.1.0.2:8080")
	if !slices.Contains(f.ipt.chains(iptablesNAT), goneSEP) {
		t.Fatalf("no chain %s for 10.1.0.2", goneSEP)
	}
	if slices.Contains(f.ipt.chains(iptablesNAT), iptEndpointChain("ns/web/tcp/80", "10.2.0.2:8080")) {
		t.Errorf("an endpoint of another cluster has a chain of its own")
	}

	t.Run("a changed endpoint rewrites its service's chains only, and deletes the chain of the endpoint gone", func(t *testing.T) {
		f.p.OnEndpointSliceUpdate(nil, newSlice("web", localCluster, []slicePort{tcp("http", 80, 8080), udp("dns", 53, 5353)}, ready("10.1.0.1")))
		f.sync()
		restores, commands := f.ipt.take()
		if len(restores) != 2 || restores[0].table != iptablesNAT || restores[1].table != iptablesFilter {
			t.Fatalf("restores %v, want one of nat then one of filter", restores)
		}
		if len(commands) != 0 {
			t.Errorf("a partial sync ran %v; it must not read the kernel's rules", commands)
		}
		nat := declared(restores[0].input)
		if !slices.Contains(nat, webChain) || slices.Contains(nat, otherChain) {
			t.Errorf("declared %v: want web's chain and not other's", nat)
		}
		if !strings.Contains(restores[0].input, "-X "+goneSEP+"\n") || slices.Contains(f.ipt.chains(iptablesNAT), goneSEP) {
			t.Errorf("the chain of the endpoint gone is not deleted:\n%s", restores[0].input)
		}
		if got := endpoints(t, f.iptTracer().trace(pkt(podClient, "243.1.0.20", "tcp", 80))); !slices.Equal(got, []string{"10.2.0.7:8080"}) {
			t.Errorf("the unchanged service now goes to %v", got)
		}
		if got := endpoints(t, f.iptTracer().trace(pkt(podClient, vip, "tcp", 80))); len(got) != 3 {
			t.Errorf("web goes to %v, want three endpoints", got)
		}
	})
	t.Run("a sync without changes writes nothing", func(t *testing.T) {
		f.sync()
		if restores, commands := f.ipt.take(); len(restores)+len(commands) != 0 {
			t.Errorf("restores %v, commands %v", restores, commands)
		}
	})
	t.Run("a removed import's chains are deleted and its ClusterSetIP no longer served", func(t *testing.T) {
		f.p.OnServiceImportDelete(other)
		f.sync()
		for _, c := range f.ipt.chains(iptablesNAT) {
			if c == otherChain || c == iptEndpointChain("ns/other/tcp/80", "10.2.0.7:8080") {
				t.Errorf("chain %s of the removed import remains", c)
			}
		}
		if got := verdicts(f.iptTracer().trace(pkt(podClient, "243.1.0.20", "tcp", 80))); !slices.Equal(got, []string{"accept"}) {
			t.Errorf("verdicts %v, want the address left alone", got)
		}
	})
}

func TestIPTablesFullSync(t *testing.T) {
	t.Run("the jump check puts back a jump deleted behind the proxier's back, and rewrites every chain", func(t *testing.T) {
		f := newIPTFixture(t, v1.IPv4Protocol)
		f.start(append(webSlices(), webImport())...)
		webChain := iptServiceChain("ns/web/tcp/80")
		f.ipt.mu.Lock()
		f.ipt.tables[iptablesNAT].chains["PREROUTING"] = nil
		f.ipt.tables[iptablesNAT].chains[webChain] = []string{}
		f.ipt.mu.Unlock()
		f.ipt.take()
		f.clock.Step(DefaultSyncPeriod)
		f.sync()
		if len(f.ipt.rules(iptablesNAT, "PREROUTING")) != 1 {
			t.Errorf("PREROUTING holds %v, want the jump back", f.ipt.rules(iptablesNAT, "PREROUTING"))
		}
		if got := endpoints(t, f.iptTracer().trace(pkt(podClient, vip, "tcp", 80))); len(got) != 4 {
			t.Errorf("after the full sync web goes to %v", got)
		}
		_, commands := f.ipt.take()
		if slices.ContainsFunc(commands, func(c string) bool { return strings.HasPrefix(c, "save") }) {
			t.Errorf("a full sync listed the tables: %v", commands)
		}
	})
	t.Run("between full syncs only the PREROUTING jump is checked, once per sync period", func(t *testing.T) {
		f := newIPTFixture(t, v1.IPv4Protocol)
		f.start(append(webSlices(), webImport())...)
		f.ipt.take()
		f.clock.Step(DefaultSyncPeriod)
		f.sync()
		if restores, commands := f.ipt.take(); len(restores) != 0 || !slices.Equal(commands, []string{"-C PREROUTING"}) {
			t.Errorf("restores %v, commands %v; want one check", restores, commands)
		}
	})
	t.Run("the first sync deletes the chains an earlier run left behind", func(t *testing.T) {
		f := newIPTFixture(t, v1.IPv4Protocol)
		stale := iptServiceChain("ns/gone/tcp/80")
		staleSEP := iptEndpointChain("ns/gone/tcp/80", "10.9.9.9:80")
		f.ipt.tables[iptablesNAT].chains[stale] = []string{"-j " + staleSEP}
		f.ipt.tables[iptablesNAT].chains[staleSEP] = []string{"-p tcp -m tcp -j DNAT --to-destination 10.9.9.9:80"}
		f.ipt.tables[iptablesFilter].chains["MCSD-OLD"] = []string{}
		f.start(append(webSlices(), webImport())...)
		for _, table := range []string{iptablesNAT, iptablesFilter} {
			for _, c := range f.ipt.chains(table) {
				if c == stale || c == staleSEP || c == "MCSD-OLD" {
					t.Errorf("leftover chain %s remains in %s", c, table)
				}
			}
		}
	})
	t.Run("a failed restore makes the next sync a rewrite", func(t *testing.T) {
		f := newIPTFixture(t, v1.IPv4Protocol)
		f.start(append(webSlices(), webImport())...)
		f.p.OnServiceImportDelete(webImport())
		f.failNextSync()
		if err := f.p.runner.fn(); err == nil {
			t.Fatal("the sync did not fail")
		}
		f.ipt.take()
		f.sync()
		_, commands := f.ipt.take()
		if !slices.Contains(commands, "save "+iptablesNAT) {
			t.Errorf("commands %v: the rewrite did not look for leftovers", commands)
		}
		if chains := f.ipt.chains(iptablesNAT); len(chains) != len(iptablesStaticChains[iptablesNAT]) {
			t.Errorf("chains %v remain, want the static ones", chains)
		}
	})
}

func TestCleanupIPTables(t *testing.T) {
	f := newIPTFixture(t, v1.IPv4Protocol)
	f.start(append(webSlices(), webImport())...)
	f.ipt.tables[iptablesNAT].chains["KUBE-SERVICES"] = []string{}
	if err := cleanupIPTables(context.Background(), f.ipt); err != nil {
		t.Fatal(err)
	}
	for _, table := range []string{iptablesNAT, iptablesFilter} {
		if chains := f.ipt.chains(table); len(chains) != 0 {
			t.Errorf("%s: chains %v remain", table, chains)
		}
		for _, builtin := range iptablesBuiltins[table] {
			if rules := f.ipt.rules(table, builtin); len(rules) != 0 {
				t.Errorf("%s %s: rules %v remain", table, builtin, rules)
			}
		}
	}
	if _, ok := f.ipt.tables[iptablesNAT].chains["KUBE-SERVICES"]; !ok {
		t.Error("a chain that is not the proxier's was deleted")
	}
	if err := cleanupIPTables(context.Background(), f.ipt); err != nil {
		t.Errorf("cleaning up nothing: %v", err)
	}
}

func TestIPTablesDualStack(t *testing.T) {
	ipt4, ipt6 := newFakeIPTables(), newFakeIPTables()
	ds := fakeDualStack(t, Config{ClusterID: localCluster, Mode: ModeIPTables, Conntrack: &fakeConntrack{}},
		func(c *Config) { c.IPTables = ipt4 }, func(c *Config) { c.IPTables = ipt6 })
	ds.OnServiceImportAdd(webImport())
	for _, s := range []*discoveryv1.EndpointSlice{
		newSlice("web", localCluster, []slicePort{tcp("http", 80, 8080)}, ready("10.1.0.1")),
		newSlice("web", localCluster, []slicePort{tcp("http", 80, 8080)}, ready("fd00:1::1")),
	} {
		ds.OnEndpointSliceAdd(s)
	}
	ds.OnServiceImportsSynced()
	ds.OnEndpointSlicesSynced()
	for _, p := range []*Proxier{ds.ipv4, ds.ipv6} {
		if err := p.runner.fn(); err != nil {
			t.Fatal(err)
		}
	}
	got4 := endpoints(t, newIPTTracer(t, ipt4).trace(pkt(podClient, vip, "tcp", 80)))
	got6 := endpoints(t, newIPTTracer(t, ipt6).trace(packet{src: netip.MustParseAddr("fd00:1::9"), dst: netip.MustParseAddr("fd00:243::10"), proto: "tcp", dport: 80}))
	if !slices.Equal(got4, []string{"10.1.0.1:8080"}) || !slices.Equal(got6, []string{"[fd00:1::1]:8080"}) {
		t.Errorf("IPv4 to %v, IPv6 to %v", got4, got6)
	}
}

func TestMode(t *testing.T) {
	for _, s := range []string{"nftables", "iptables", "auto"} {
		if m, err := ParseMode(s); err != nil || string(m) != s {
			t.Errorf("ParseMode(%q) = %q, %v", s, m, err)
		}
	}
	if _, err := ParseMode("ipvs"); err == nil {
		t.Error("ParseMode accepted ipvs")
	}
	for _, c := range []struct{ in, want Mode }{{"", ModeNFTables}, {ModeNFTables, ModeNFTables}, {ModeIPTables, ModeIPTables}} {
		if got, err := resolveMode(context.Background(), c.in); err != nil || got != c.want {
			t.Errorf("resolveMode(%q) = %q, %v; want %q", c.in, got, err, c.want)
		}
	}
	if _, err := resolveMode(context.Background(), "ipvs"); err == nil {
		t.Error("resolveMode accepted ipvs")
	}
}
