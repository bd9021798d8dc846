package main

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mcsd-io/mcsd/test/lib/netns"
	"github.com/mcsd-io/mcsd/test/lib/testenv"
)

// mcsd --cleanup removes what either proxier mode left in a network
// namespace, both families, and nothing else: run as the README's
// uninstall runs it, on rules as mcsd writes them (the table mcsd and the
// chains MCSD-... with the jumps to them).
func TestCleanupRemovesEveryRuleOfMCSDAndNothingElse(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequireCommands(t, "nft", "iptables", "ip6tables")
	bin := filepath.Join(t.TempDir(), "mcsd")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("building mcsd: %v\n%s", err, out)
	}
	ns := netns.ForTest(t, "mcsdcl", "node")
	for _, cmd := range [][]string{
		{"nft", "add", "table", "ip", "mcsd"},
		{"nft", "add", "table", "ip6", "mcsd"},
		{"nft", "add", "table", "ip", "other"},
		// The jumps as iptables mode writes them.
		{"iptables", "-t", "nat", "-N", "MCSD-SERVICES"},
		{"iptables", "-t", "nat", "-A", "OUTPUT", "-m", "comment", "--comment", "mcsd ClusterSetIPs", "-j", "MCSD-SERVICES"},
		{"ip6tables", "-t", "filter", "-N", "MCSD-FILTER"},
		{"ip6tables", "-t", "filter", "-A", "OUTPUT", "-m", "conntrack", "--ctstate", "NEW", "-m", "comment", "--comment", "mcsd ClusterSetIP rejects", "-j", "MCSD-FILTER"},
		{"iptables", "-t", "nat", "-N", "OTHER"},
		{"iptables", "-t", "nat", "-A", "OUTPUT", "-j", "OTHER"},
	} {
		if out, err := ns.Exec(cmd[0], cmd[1:]...); err != nil {
			t.Fatalf("%v: %v %s", cmd, err, out)
		}
	}
	out, err := exec.Command(bin, "--cleanup", "--netns="+netns.Path(ns.Name)).CombinedOutput()
	if err != nil {
		t.Fatalf("mcsd --cleanup: %v\n%s", err, out)
	}
	tables, err := ns.Exec("nft", "list", "tables")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(tables, " mcsd") || !strings.Contains(tables, "table ip other") {
		t.Errorf("nftables tables after --cleanup:\n%s\nwant mcsd's gone and the other kept", tables)
	}
	for _, save := range []string{"iptables-save", "ip6tables-save"} {
		rules, err := ns.Exec(save)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(rules, "MCSD") {
			t.Errorf("%s after --cleanup keeps mcsd's chains:\n%s", save, rules)
		}
		if save == "iptables-save" && !strings.Contains(rules, ":OTHER") {
			t.Errorf("--cleanup removed a chain not mcsd's:\n%s", rules)
		}
	}
	// A second run finds nothing and succeeds: an uninstall can be retried.
	if out, err := exec.Command(bin, "--cleanup", "--netns="+netns.Path(ns.Name)).CombinedOutput(); err != nil {
		t.Fatalf("mcsd --cleanup again: %v\n%s", err, out)
	}
}
