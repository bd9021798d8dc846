package harness

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"text/template"

	"k8s.io/client-go/rest"

	"github.com/mcsd-io/mcsd/test/lib/images"
)

// writeConfig writes what the node's programs read: certificates and
// kubeconfigs (the kubelet as system:node:<name>, kube-proxy as
// system:kube-proxy, both reaching the API server through the gateway),
// containerd's configuration with the pause image as its sandbox image,
// the CNI network, the kubelet's and kube-proxy's configurations.
func (n *RealNode) writeConfig(pause images.Image) error {
	c := n.Cluster
	pki := filepath.Join(n.Dir, "pki")
	if err := os.MkdirAll(pki, 0o700); err != nil {
		return err
	}
	caPath := filepath.Join(pki, "ca.crt")
	if err := os.WriteFile(caPath, c.ca.certPEM, 0o600); err != nil {
		return err
	}
	serving, err := c.ca.issueServer(n.Name, []net.IP{net.IP(n.IP.AsSlice())}, []string{n.Name})
	if err != nil {
		return err
	}
	servingCert, servingKey, err := writePair(pki, "kubelet", serving)
	if err != nil {
		return err
	}
	for _, id := range []struct{ file, user, group string }{
		{"kubelet.kubeconfig", "system:node:" + n.Name, "system:nodes"},
		{"kube-proxy.kubeconfig", "system:kube-proxy", ""},
	} {
		var groups []string
		if id.group != "" {
			groups = []string{id.group}
		}
		kp, err := c.ca.issue(id.user, groups, false)
		if err != nil {
			return err
		}
		cfg := &rest.Config{Host: c.GatewayServer(), TLSClientConfig: rest.TLSClientConfig{CAData: c.ca.certPEM, CertData: kp.CertPEM, KeyData: kp.KeyPEM}}
		if err := c.WriteKubeconfig(filepath.Join(n.Dir, id.file), cfg); err != nil {
			return err
		}
	}
	// Pods with dnsPolicy Default get this file; nothing of a run may
	// resolve names outside it.
	if err := os.WriteFile(filepath.Join(n.Dir, "resolv.conf"), []byte("# no upstream resolvers inside the harness\n"), 0o644); err != nil {
		return err
	}
	cni := filepath.Join(n.Dir, "cni")
	if err := os.MkdirAll(cni, 0o755); err != nil {
		return err
	}
	data := map[string]any{
		"Node":          n,
		"Dir":           n.Dir,
		"CA":            caPath,
		"ServingCert":   servingCert,
		"ServingKey":    servingKey,
		"CgroupRoot":    n.cgroup + "/pods",
		"DNS":           c.DNSServiceIP(),
		"ClusterCIDR":   c.PodCIDR.String(),
		"PodSubnet":     n.PodSubnet.String(),
		"Pause":         pause.Ref,
		"Runc":          n.bins.runc,
		"CNIBin":        n.bins.cniDir,
		"CNIConf":       cni,
		"ProxyKubeconf": filepath.Join(n.Dir, "kube-proxy.kubeconfig"),
	}
	for file, tmpl := range map[string]*template.Template{
		"containerd.toml":         containerdConfig,
		"kubelet.yaml":            kubeletConfig,
		"kube-proxy.yaml":         proxyConfig,
		"cni/10-harness.conflist": cniConfig,
	} {
		var b strings.Builder
		if err := tmpl.Execute(&b, data); err != nil {
			return fmt.Errorf("rendering %s: %w", file, err)
		}
		if err := os.WriteFile(filepath.Join(n.Dir, file), []byte(b.String()), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// containerdConfig: everything in its default places, which the node's
// mount namespace makes the node's own (/var/lib/containerd,
// /run/containerd). Plugins that would touch the machine outside those
// (the /opt plugin directory, NRI's socket and plugin paths) or that need
// what this machine lacks are off. The sandbox (pause) image is pinned, so
// the kubelet never tries to pull it. Containers get no OOM score below
// containerd's own: lowering one takes CAP_SYS_RESOURCE, which a test's
// sandbox may not grant (runc would fail to start every pod sandbox).
var containerdConfig = template.Must(template.New("containerd").Parse(`version = 3
disabled_plugins = [
  "io.containerd.internal.v1.opt",
  "io.containerd.nri.v1.nri",
  "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.erofs",
  "io.containerd.tracing.processor.v1.otlp",
]

[plugins.'io.containerd.cri.v1.images']
  snapshotter = 'overlayfs'
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = '{{.Pause}}'

[plugins.'io.containerd.cri.v1.runtime']
  cdi_spec_dirs = []
  restrict_oom_score_adj = true
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ['{{.CNIBin}}']
    conf_dir = '{{.CNIConf}}'
  [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
    runtime_type = 'io.containerd.runc.v2'
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
      BinaryName = '{{.Runc}}'
      SystemdCgroup = false
`))

// cniConfig: a routed veth per pod (ptp), an address from the node's pod
// subnet (host-local, its state in /var/lib/cni of the node), no
// masquerading: the harness's pod network is flat and routed.
var cniConfig = template.Must(template.New("cni").Parse(`{
  "cniVersion": "1.0.0",
  "name": "harness",
  "plugins": [
    {
      "type": "ptp",
      "mtu": 1500,
      "ipMasq": false,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": "{{.PodSubnet}}"}]],
        "routes": [{"dst": "0.0.0.0/0"}]
      }
    }
  ]
}
`))

// kubeletConfig: cgroup v1 allowed, the cgroupfs driver (no systemd) under
// the node's own cgroup root; clients authenticated by the run's CA and
// authorized by the API server; the cluster DNS at its fixed ClusterIP; its
// own OOM score left as it is (see containerdConfig).
// Images are imported, never pulled, so image garbage collection and disk
// eviction are kept from removing them on a busy machine.
var kubeletConfig = template.Must(template.New("kubelet").Parse(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: {{.CgroupRoot}}
containerRuntimeEndpoint: unix:///run/containerd/containerd.sock
address: {{.Node.IP}}
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
  x509:
    clientCAFile: {{.CA}}
authorization:
  mode: Webhook
tlsCertFile: {{.ServingCert}}
tlsPrivateKeyFile: {{.ServingKey}}
rotateCertificates: false
serverTLSBootstrap: false
clusterDomain: cluster.local
clusterDNS:
- {{.DNS}}
resolvConf: {{.Dir}}/resolv.conf
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: 100Mi
  nodefs.available: 1%
  imagefs.available: 1%
  nodefs.inodesFree: 1%
serializeImagePulls: false
shutdownGracePeriod: 0s
podPidsLimit: -1
oomScoreAdj: 0
`))

// proxyConfig: nftables mode; the conntrack sysctls are left alone (they
// are not all per network namespace).
var proxyConfig = template.Must(template.New("kube-proxy").Parse(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: nftables
clientConnection:
  kubeconfig: {{.ProxyKubeconf}}
hostnameOverride: {{.Node.Name}}
clusterCIDR: {{.ClusterCIDR}}
metricsBindAddress: 127.0.0.1:10249
healthzBindAddress: 127.0.0.1:10256
oomScoreAdj: 0
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
  udpTimeout: 0s
  udpStreamTimeout: 0s
`))
