package main

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/mcsd-io/mcsd/proxier"
)

func parse(t *testing.T, args ...string) (*options, error) {
	t.Helper()
	o := &options{}
	fs, _, raw := o.flagSets()
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	return o, o.complete(raw)
}

func TestBadFlagsAreNamed(t *testing.T) {
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte("apiVersion: v1\nkind: Config\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	base := []string{"--broker-kubeconfig=" + kubeconfig, "--node-name=node-1"}
	for _, tc := range []struct {
		name string
		args []string
		flag string
	}{
		{"an unknown component", []string{"--components=exporter,router"}, "--components:"},
		{"no component", []string{"--components=,"}, "--components:"},
		{"controllers without a broker", []string{"--broker-kubeconfig=", "--components=importer"}, "--broker-kubeconfig:"},
		{"both broker credentials", []string{"--broker-secret=ns/name"}, "--broker-secret:"},
		{"a broker secret that is not NAMESPACE/NAME", []string{"--broker-kubeconfig=", "--broker-secret=name"}, "--broker-secret:"},
		{"a missing kubeconfig file", []string{"--kubeconfig=/nonexistent/kubeconfig"}, "--kubeconfig:"},
		{"a cluster ID that is not a DNS label", []string{"--cluster-id=East_1"}, "--cluster-id:"},
		{"a clusterset range that is not a CIDR", []string{"--clusterset-cidrs=243.0.0.0"}, "--clusterset-cidrs:"},
		{"two IPv4 clusterset ranges", []string{"--clusterset-cidrs=243.0.0.0/8,244.0.0.0/8"}, "--clusterset-cidrs:"},
		{"a VIP block outside the clusterset range", []string{"--clusterset-cidrs=243.0.0.0/8", "--cluster-vip-cidrs=10.0.0.0/16"}, "--cluster-vip-cidrs:"},
		{"a block size that does not fit", []string{"--vip-block-bits-ipv4=4"}, "--vip-block-bits-ipv4:"},
		{"a denied namespace that is not a namespace name", []string{"--import-namespace-denylist=kube-system,Kube_Public"}, "--import-namespace-denylist:"},
		{"no room for a single service per cluster", []string{"--max-services-per-cluster=0"}, "--max-services-per-cluster:"},
		{"a grace shorter than the TTL", []string{"--gone-cluster-grace=1s"}, "--gone-cluster-grace:"},
		{"a TTL shorter than the renewal cadence", []string{"--lease-duration=10s", "--cluster-ttl=2s"}, "--cluster-ttl:"},
		{"a renew deadline past the lease", []string{"--leader-elect-renew-deadline=20s"}, "--leader-elect-renew-deadline:"},
		{"a DNS address without a port", []string{"--dns-listen=127.0.0.1"}, "--dns-listen:"},
		{"a DNS TTL out of range", []string{"--dns-ttl=0s"}, "--dns-ttl:"},
		{"a DNS reverse range that is not a CIDR", []string{"--dns-reverse-cidrs=10.0.0.0"}, "--dns-reverse-cidrs:"},
		{"a DNS reverse range wider than a zone", []string{"--dns-reverse-cidrs=0.0.0.0/4"}, "--dns-reverse-cidrs:"},
		{"an unknown DNS gate", []string{"--dns-gate=zone"}, "--dns-gate:"},
		{"the cluster's DNS gate without the node's name", []string{"--node-name="}, "--dns-gate:"},
		{"an unknown IP family", []string{"--ip-families=IPv5"}, "--ip-families:"},
		{"a metrics certificate that does not exist", []string{"--metrics-tls-cert-file=/nonexistent/tls.crt", "--metrics-tls-private-key-file=/nonexistent/tls.key"}, "--metrics-tls-cert-file:"},
		{"a metrics certificate without its key", []string{"--metrics-tls-cert-file=" + kubeconfig}, "--metrics-tls-private-key-file:"},
		{"plain metrics off loopback", []string{"--metrics-secure=false", "--metrics-address=:10273"}, "--metrics-secure:"},
		{"plain metrics with a certificate", []string{"--metrics-secure=false", "--metrics-tls-cert-file=" + kubeconfig, "--metrics-tls-private-key-file=" + kubeconfig}, "--metrics-secure:"},
		{"a masquerade mark of two bits", []string{"--masquerade-mark=0x3000"}, "--masquerade-mark:"},
		{"a pod CIDR that is not one", []string{"--pod-cidrs=10.0.0.0/33"}, "--pod-cidrs:"},
		{"an unknown proxier mode", []string{"--proxier-mode=ipvs"}, "--proxier-mode:"},
		{"a sync period shorter than the minimum", []string{"--proxier-min-sync-period=10s", "--proxier-sync-period=1s"}, "--proxier-sync-period:"},
		{"a network namespace that does not exist", []string{"--netns=/run/netns/nonexistent-mcsd"}, "--netns:"},
		{"a metrics address without a port", []string{"--metrics-address=localhost"}, "--metrics-address:"},
		{"a number that is not one", []string{"--kube-api-qps=many"}, `"--kube-api-qps"`},
		{"a duration without a unit", []string{"--lease-duration=10"}, `"--lease-duration"`},
		{"a boolean that is not one", []string{"--leader-elect=maybe"}, `"--leader-elect"`},
		{"an unknown flag", []string{"--cluster-name=east"}, "unknown flag: --cluster-name"},
		{"an unknown log format", []string{"--logging-format=xml"}, "--logging-format:"},
		{"a log flush frequency of zero", []string{"--log-flush-frequency=0s"}, "--log-flush-frequency:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parse(t, append(append([]string{}, base...), tc.args...)...)
			if err == nil {
				t.Fatalf("%v accepted", tc.args)
			}
			if !strings.Contains(err.Error(), tc.flag) {
				t.Fatalf("error does not name %s: %v", tc.flag, err)
			}
		})
	}
}

func TestGoodFlags(t *testing.T) {
	t.Run("the defaults run every component when a broker is given", func(t *testing.T) {
		dir := t.TempDir()
		kubeconfig := filepath.Join(dir, "broker")
		if err := os.WriteFile(kubeconfig, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		o, err := parse(t, "--broker-kubeconfig="+kubeconfig, "--node-name=node-1")
		if err != nil {
			t.Fatal(err)
		}
		if len(o.components) != 4 || !o.runsControllers() {
			t.Fatalf("components = %v", o.components)
		}
		if len(o.clusterSetCIDRs) != 2 || len(o.ipFamilies) != 0 {
			t.Fatalf("clusterset CIDRs %v, families %v: want both clusterset ranges, and the families left to the cluster by default", o.clusterSetCIDRs, o.ipFamilies)
		}
		if o.proxierMode != proxier.ModeNFTables {
			t.Fatalf("proxier mode %q, want nftables by default", o.proxierMode)
		}
		if !slices.Equal(o.importDeniedNamespaces, []string{"kube-system", "kube-public"}) {
			t.Fatalf("denied namespaces %v, want kube-system and kube-public by default", o.importDeniedNamespaces)
		}
		o, err = parse(t, "--broker-kubeconfig="+kubeconfig, "--node-name=node-1", "--import-namespace-denylist=", "--max-services-per-cluster=5", "--gone-cluster-grace=1h")
		if err != nil {
			t.Fatal(err)
		}
		if o.importDeniedNamespaces == nil || len(o.importDeniedNamespaces) != 0 || o.maxServicesPerCluster != 5 || o.goneClusterGrace.Hours() != 1 {
			t.Fatalf("denied %#v, cap %d, grace %v: want none denied (not the default), 5, 1h", o.importDeniedNamespaces, o.maxServicesPerCluster, o.goneClusterGrace)
		}
	})
	t.Run("the data plane alone needs no broker", func(t *testing.T) {
		o, err := parse(t, "--components=dns,proxier", "--node-name=node-1", "--ip-families=IPv4", "--pod-cidrs=10.244.0.0/16, fd00::/64", "--masquerade-mark=0x4000",
			"--proxier-mode=iptables")
		if err != nil {
			t.Fatal(err)
		}
		if o.runsControllers() || o.masqMark != 0x4000 || len(o.podCIDRs) != 2 || o.proxierMode != proxier.ModeIPTables {
			t.Fatalf("parsed %+v", o)
		}
	})
}

func TestFlagSpelling(t *testing.T) {
	t.Run("the flags the test harness and the DaemonSet pass still parse", func(t *testing.T) {
		dir := t.TempDir()
		kubeconfig := filepath.Join(dir, "kubeconfig")
		if err := os.WriteFile(kubeconfig, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		o, err := parse(t, "--kubeconfig="+kubeconfig, "--broker-kubeconfig="+kubeconfig, "--broker-namespace=mcsd-broker",
			"--cluster-id=east", "--netns="+dir, "--node-name=node-1", "--dns-listen=[::1]:5353", "--pod-cidrs=10.244.0.0/16",
			"--ip-families=IPv4", "--health-address=127.0.0.1:9091", "--metrics-address=127.0.0.1:9090",
			"--lease-duration=3s", "--cluster-ttl=6s", "--leader-elect-lease-duration=4s", "--leader-elect-renew-deadline=3s",
			"--leader-elect-retry-period=500ms", "--proxier-min-sync-period=100ms", "--v=2")
		if err != nil {
			t.Fatal(err)
		}
		if o.clusterID != "east" || o.leaseDuration.Seconds() != 3 || o.logs.Verbosity != 2 || o.nodeName != "node-1" {
			t.Fatalf("parsed %+v", o)
		}
	})
	t.Run("a value may follow its flag, and -v is its shorthand", func(t *testing.T) {
		o, err := parse(t, "--components", "dns", "--cluster-id", "west", "-v", "4", "--masquerade-all")
		if err != nil {
			t.Fatal(err)
		}
		if o.clusterID != "west" || o.logs.Verbosity != 4 || !o.masqAll {
			t.Fatalf("parsed %+v", o)
		}
	})
	t.Run("underscores stand for dashes, as in Kubernetes components", func(t *testing.T) {
		o, err := parse(t, "--components=dns", "--cluster_id=west")
		if err != nil {
			t.Fatal(err)
		}
		if o.clusterID != "west" {
			t.Fatalf("cluster ID %q", o.clusterID)
		}
	})
	t.Run("Go's single-dash long flags are refused, naming the flag", func(t *testing.T) {
		_, err := parse(t, "-cluster-id=west")
		if err == nil || !strings.Contains(err.Error(), "-cluster-id=west") {
			t.Fatalf("err = %v", err)
		}
	})
}

func TestHelpGroupsEveryFlag(t *testing.T) {
	o := &options{}
	fs, nfs, _ := o.flagSets()
	var out bytes.Buffer
	printUsage(&out, nfs)
	help := out.String()
	// Each group's heading comes before the flags of the next one.
	last := -1
	for _, group := range []string{"General", "Connection", "Cluster identity", "ClusterSetIP", "Controllers", "DNS", "Proxier", "Observability", "Logging"} {
		at := strings.Index(help, "\n"+group+" flags:\n")
		if at <= last {
			t.Fatalf("group %q missing or out of order in:\n%s", group, help)
		}
		last = at
	}
	n := 0
	fs.VisitAll(func(f *pflag.Flag) {
		n++
		if !strings.Contains(help, "--"+f.Name+" ") {
			t.Errorf("--%s is not in --help", f.Name)
		}
	})
	if n < 55 {
		t.Fatalf("only %d flags registered", n)
	}
	for flag, group := range map[string]string{"--broker-secret": "Connection", "--proxier-mode": "Proxier", "--vmodule": "Logging", "--health-address": "Observability", "--version": "General"} {
		heading := "\n" + group + " flags:\n"
		section := help[strings.Index(help, heading)+len(heading):]
		if next := strings.Index(section, " flags:\n"); next > 0 {
			section = section[:next]
		}
		if !strings.Contains(section, flag+" ") {
			t.Errorf("%s is not in the %s group", flag, group)
		}
	}
}
