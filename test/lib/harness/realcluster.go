package harness

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// What a cluster's control plane does differently in a run with real
// nodes: its API server is reached through the gateway and reaches nodes
// and pods through it; in member clusters it also authorizes kubelets as
// nodes and talks to them with a client certificate of the run's CA,
// kube-scheduler places pods, and the controller manager runs the
// controllers of Deployments and DaemonSets.
//
// No node lifecycle controller runs (nor does the admission plugin that
// taints new Nodes not-ready until it lifts the taint): a cluster may mix
// real nodes with harness nodes, whose Node objects no kubelet renews, and
// the controller would evict the harness pods on them. Real nodes do not
// fail in these tests; a kubelet that stops simply stops updating its Node.

// gatewayFlags are the API server's flags for a run with real nodes.
func (c *Cluster) gatewayFlags(pki string) ([]string, error) {
	egress := filepath.Join(pki, "egress-selector.yaml")
	config := fmt.Sprintf(`apiVersion: apiserver.k8s.io/v1beta1
kind: EgressSelectorConfiguration
egressSelections:
- name: cluster
  connection:
    proxyProtocol: HTTPConnect
    transport:
      uds:
        udsName: %s
`, c.gateway.egressSocket)
	if err := os.WriteFile(egress, []byte(config), 0o600); err != nil {
		return nil, err
	}
	mode := "RBAC"
	if c.real {
		mode = "Node,RBAC"
	}
	flags := []string{
		"--authorization-mode=" + mode,
		// The default reconciler keeps the kubernetes Service's endpoints
		// at the advertised address and the serving port: the gateway.
		"--advertise-address=" + GatewayIP.String(),
		"--endpoint-reconciler-type=lease",
		"--egress-selector-config-file=" + egress,
	}
	if !c.real {
		return flags, nil
	}
	client, err := c.ca.issue("kube-apiserver-kubelet-client", []string{"system:masters"}, false)
	if err != nil {
		return nil, err
	}
	cert, key, err := writePair(pki, "kubelet-client", client)
	if err != nil {
		return nil, err
	}
	return append(flags,
		"--disable-admission-plugins=TaintNodesByCondition",
		"--kubelet-client-certificate="+cert,
		"--kubelet-client-key="+key,
		"--kubelet-certificate-authority="+filepath.Join(pki, "ca.crt"),
		"--kubelet-preferred-address-types=InternalIP",
	), nil
}

// controllers are the kube-controller-manager controllers the cluster runs.
func (c *Cluster) controllers() string {
	list := []string{
		"namespace-controller", "garbage-collector-controller", "endpointslice-controller",
		"serviceaccount-controller", "serviceaccount-token-controller",
		"root-ca-certificate-publisher-controller", "clusterrole-aggregation-controller",
		"resourcequota-controller",
	}
	if c.real {
		list = append(list, "deployment-controller", "replicaset-controller", "daemonset-controller", "pod-garbage-collector-controller")
	}
	return strings.Join(list, ",")
}

// startScheduler starts kube-scheduler as system:kube-scheduler, whose
// rights the API server bootstraps.
func (c *Cluster) startScheduler() error {
	kubeconfig := filepath.Join(c.dir, "kube-scheduler.kubeconfig")
	cfg, err := c.UserConfig("system:kube-scheduler")
	if err != nil {
		return err
	}
	if err := c.WriteKubeconfig(kubeconfig, cfg); err != nil {
		return err
	}
	c.scheduler = &process{
		name: c.Name + "-scheduler", path: c.nodeBins.scheduler, logPath: filepath.Join(c.dir, "scheduler.log"), pidDir: filepath.Dir(c.dir),
		args: []string{
			"--kubeconfig=" + kubeconfig,
			"--leader-elect=false",
			"--secure-port=0",
			"--v=1",
		},
	}
	return c.scheduler.start()
}

// withoutFlags drops the flags with the given names from args.
func withoutFlags(args []string, names ...string) []string {
	var out []string
	for _, a := range args {
		name, _, _ := strings.Cut(a, "=")
		drop := false
		for _, n := range names {
			drop = drop || name == n
		}
		if !drop {
			out = append(out, a)
		}
	}
	return out
}
