package harness

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"k8s.io/klog/v2"

	"github.com/mcsd-io/mcsd/test/lib/netns"
)

// The API servers listen on loopback only, and nothing of a run may be
// reachable from outside its namespaces. Real nodes still have to reach
// them (kubelets, kube-proxy, pods through the `kubernetes` Service, mcsd
// through its broker kubeconfig), and the API servers have to reach nodes
// and pods (logs, the pod proxy). Both directions go through the harness
// process:
//
//   - The fabric namespace gets one address on its bridge, GatewayIP. For
//     every cluster the harness listens on GatewayIP:<the API server's
//     port> inside the fabric (the socket lives there) and copies each
//     connection to 127.0.0.1:<port>. API servers advertise that address,
//     so the `kubernetes` Service's endpoints lead there, and their
//     serving certificates name it.
//   - Every API server sends its traffic to the cluster (the egress
//     selection "cluster": kubelets, pods, services) as HTTP CONNECT to a
//     Unix socket of the run, where the harness dials the target from
//     inside the fabric namespace, which routes to every node and pod.
type gateway struct {
	net *Network
	// egressSocket is the Unix socket of the CONNECT proxy.
	egressSocket string

	mu         sync.Mutex
	listeners  []net.Listener
	egress     *http.Server
	conns      map[net.Conn]struct{}
	closed     bool
	copiesDone sync.WaitGroup
}

// GatewayIP is the fabric's address where the API servers of a run with
// real nodes are reached from nodes and pods, each on its own port.
var GatewayIP = netip.AddrFrom4([4]byte{100, 64, 0, 254})

// OperatorIP is the address of the run's operator namespace on the fabric.
var OperatorIP = netip.AddrFrom4([4]byte{100, 64, 0, 253})

// openGateway gives the fabric its address and routes to the pod subnets of
// nodes made later (see routeToNode), and starts the CONNECT proxy.
func (n *Network) openGateway(socket string) (*gateway, error) {
	if _, err := n.fabric.IP("addr", "add", GatewayIP.String()+"/24", "dev", fabricBridge); err != nil {
		return nil, err
	}
	g := &gateway{net: n, egressSocket: socket, conns: map[net.Conn]struct{}{}}
	l, err := net.Listen("unix", socket)
	if err != nil {
		return nil, fmt.Errorf("listening on the egress socket %s: %w", socket, err)
	}
	g.egress = &http.Server{Handler: http.HandlerFunc(g.connect), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = g.egress.Serve(l) }()
	n.mu.Lock()
	n.gateway = g
	n.mu.Unlock()
	return g, nil
}

// addOperator makes the operator namespace: a machine on the fabric with no
// pods, from where an operator's tools reach every API server at the
// gateway, as a cluster's nodes do.
func (n *Network) addOperator() (*netns.NS, error) {
	ns, err := netns.New(n.prefix + "operator")
	if err != nil {
		return nil, err
	}
	if err := netns.Veth(n.fabric, "operator", ns, "uplink"); err != nil {
		_ = ns.Delete()
		return nil, err
	}
	if _, err := n.fabric.IP("link", "set", "operator", "master", fabricBridge); err != nil {
		_ = ns.Delete()
		return nil, err
	}
	if _, err := ns.IP("addr", "add", OperatorIP.String()+"/24", "dev", "uplink"); err != nil {
		_ = ns.Delete()
		return nil, err
	}
	n.mu.Lock()
	n.operator = ns
	n.mu.Unlock()
	return ns, nil
}

// routeToNode lets the fabric answer the pods of a node (their packets to
// GatewayIP come from pod addresses). The Network's mutex must be held.
func (n *Network) routeToNode(node *Node) error {
	if n.gateway == nil {
		return nil
	}
	for k, ip := range node.IPs {
		if !ip.Is4() {
			continue
		}
		if _, err := n.fabric.IP("route", "add", node.PodSubnets[k].String(), "via", ip.String()); err != nil {
			return err
		}
	}
	return nil
}

// forward listens on GatewayIP:port in the fabric and copies each
// connection to 127.0.0.1:port.
func (g *gateway) forward(port int) error {
	addr := net.JoinHostPort(GatewayIP.String(), strconv.Itoa(port))
	l, err := g.net.fabric.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listening on %s in the fabric: %w", addr, err)
	}
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		l.Close()
		return errors.New("the gateway is closed")
	}
	g.listeners = append(g.listeners, l)
	g.mu.Unlock()
	target := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go g.splice(c, func(ctx context.Context) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, "tcp", target)
			})
		}
	}()
	return nil
}

// connect serves one HTTP CONNECT of an API server: it dials the target
// inside the fabric and splices the two connections.
func (g *gateway) connect(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodConnect {
		http.Error(w, "only CONNECT", http.StatusMethodNotAllowed)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	upstream, err := g.net.fabric.Dial(ctx, "tcp", r.Host)
	if err != nil {
		klog.V(2).InfoS("The harness's egress proxy could not reach a target", "target", r.Host, "err", err)
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	hj, ok := w.(http.Hijacker)
	if !ok {
		upstream.Close()
		http.Error(w, "no hijacking", http.StatusInternalServerError)
		return
	}
	client, buf, err := hj.Hijack()
	if err != nil {
		upstream.Close()
		return
	}
	if _, err := client.Write([]byte("HTTP/1.1 200 Connection established\r\n\r\n")); err != nil {
		client.Close()
		upstream.Close()
		return
	}
	// Bytes the client sent right behind its request are already read.
	if n := buf.Reader.Buffered(); n > 0 {
		pending, _ := buf.Reader.Peek(n)
		if _, err := upstream.Write(pending); err != nil {
			client.Close()
			upstream.Close()
			return
		}
	}
	go g.splice(client, func(context.Context) (net.Conn, error) { return upstream, nil })
}

// splice copies between a and the connection dial makes until either side
// closes, and tracks both so that close ends them.
func (g *gateway) splice(a net.Conn, dial func(context.Context) (net.Conn, error)) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	b, err := dial(ctx)
	cancel()
	if err != nil {
		a.Close()
		return
	}
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		a.Close()
		b.Close()
		return
	}
	g.conns[a], g.conns[b] = struct{}{}, struct{}{}
	g.copiesDone.Add(1)
	g.mu.Unlock()
	defer g.copiesDone.Done()
	done := make(chan struct{}, 2)
	cp := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		if tc, ok := dst.(interface{ CloseWrite() error }); ok {
			_ = tc.CloseWrite()
		}
		done <- struct{}{}
	}
	go cp(a, b)
	go cp(b, a)
	<-done
	<-done
	a.Close()
	b.Close()
	g.mu.Lock()
	delete(g.conns, a)
	delete(g.conns, b)
	g.mu.Unlock()
}

// close stops listening and ends every connection.
func (g *gateway) close() {
	g.mu.Lock()
	g.closed = true
	for _, l := range g.listeners {
		l.Close()
	}
	for c := range g.conns {
		c.Close()
	}
	g.mu.Unlock()
	_ = g.egress.Close()
	g.copiesDone.Wait()
}
