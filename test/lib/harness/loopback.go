package harness

import (
	"io"
	"net"
	"net/url"
)

// ForwardAPIServer lets a program that runs inside the node with the
// cluster's kubeconfig, which names the API server on 127.0.0.1 (inside
// the node the node's own loopback), reach it: it listens on that address
// inside the node's namespace and copies every connection to the real
// one. The returned function stops listening.
func (n *Node) ForwardAPIServer() (func(), error) {
	server, err := url.Parse(n.Cluster.Server())
	if err != nil {
		return nil, err
	}
	return n.forwardLoopback(server.Host)
}

// KubeProxyArgs are the flags of a kube-proxy in mode ("nftables" or
// "iptables") on the node, against its cluster's API server (see
// ForwardAPIServer), serving its metrics and health on the addresses given
// (inside the node), and leaving the host's conntrack settings alone.
func (n *Node) KubeProxyArgs(mode, metricsAddress, healthzAddress string) []string {
	return []string{
		"--kubeconfig=" + n.Cluster.KubeconfigPath,
		"--proxy-mode=" + mode,
		"--hostname-override=" + n.Name,
		"--cluster-cidr=" + n.Cluster.PodCIDR.String(),
		"--metrics-bind-address=" + metricsAddress,
		"--healthz-bind-address=" + healthzAddress,
		"--conntrack-max-per-core=0",
		"--conntrack-tcp-timeout-established=0",
		"--conntrack-tcp-timeout-close-wait=0",
		"--conntrack-udp-timeout=0",
		"--conntrack-udp-timeout-stream=0",
		"--v=2",
	}
}

// forwardLoopback listens on address (a loopback address and port of the
// harness process) inside the node's namespace and copies every
// connection to the same address outside it.
func (n *Node) forwardLoopback(address string) (func(), error) {
	l, err := n.NS.Listen("tcp", address)
	if err != nil {
		return nil, err
	}
	go func() {
		for {
			in, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer in.Close()
				out, err := net.Dial("tcp", address)
				if err != nil {
					return
				}
				defer out.Close()
				done := make(chan struct{}, 2)
				go func() { _, _ = io.Copy(out, in); done <- struct{}{} }()
				go func() { _, _ = io.Copy(in, out); done <- struct{}{} }()
				<-done
			}()
		}
	}()
	return func() { _ = l.Close() }, nil
}
