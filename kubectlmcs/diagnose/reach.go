package diagnose

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/mcsd-io/mcsd/kubectlmcs/membership"
	"github.com/mcsd-io/mcsd/kubectlmcs/status"
	"github.com/mcsd-io/mcsd/kubectlmcs/verify"
)

// MCS needs a flat pod network across the members: a pod of one connects
// to a pod IP of another. The reachability check proves it between this
// member and each peer, both ways: a probe pod in each (mcsd's own image,
// the one its mcsd runs, `mcsd probe serve`), then in each a pod that
// connects to the other's probe by its pod IP (`mcsd probe check`), with
// datagrams alongside that tell a broken way there from a broken way back.
// It reads what they found from their logs, judges it (route.go) and
// removes the pods (probepod.go). The pods are restricted (no host network, not root, no
// capability, no token), end on their own after ProbeDeadline, live in
// mcsd's namespace and carry ProbeLabel, so that leftovers are found.

// ProbeLabel marks the pods of the reachability check (value
// "reachability"): kubectl -n mcsd-system delete pods -l mcsd.io/diagnose
// removes any a killed diagnose left.
const ProbeLabel = "mcsd.io/diagnose"

const (
	probeLabelValue = "reachability"
	probePort       = 8080
	// probeUser is the controller's non-root user.
	probeUser = 65532
	// ProbeDeadline is how long a probe pod may run at most (its
	// activeDeadlineSeconds).
	ProbeDeadline = 5 * time.Minute
	// probeStart bounds how long the probe pods may take to run.
	probeStart = time.Minute
	// DefaultReachTimeout is how long a pod tries to connect to another
	// member's probe.
	DefaultReachTimeout = 10 * time.Second
)

// Peer is another member, reached with an administrator's configuration,
// to check pod reachability with.
type Peer struct {
	// Name says which one it is in messages (its kubeconfig context).
	Name   string
	Config *rest.Config
}

// reachMember is a member taking part in the probe.
type reachMember struct {
	// name is how the operator calls it: a context, or "the member".
	name  string
	id    string
	kube  kubernetes.Interface
	image string
	// serve and check are the probe pods, as last read.
	serve, check *corev1.Pod
}

// reachability checks pod reachability between the member and each peer,
// both ways: a check per direction.
func (r *run) reachability(ctx context.Context) {
	const name = "pod reachability"
	fix := "diagnose creates pods of mcsd's image in " + mcsdNamespace + " of each member (restricted, labelled " + ProbeLabel + "=" + probeLabelValue + "): let it, or give --skip-reachability where pods may not be created"
	switch {
	case r.opts.SkipReachability:
		return
	case len(r.opts.Peers) == 0:
		r.skip(name, "not checked: give other members' kubeconfig contexts (--peer-contexts) to check that pods here and there connect to each other's pod IPs, as MCS needs (see "+flatNetworkDoc+")")
		return
	case r.id == "":
		r.skip(name, "the member's cluster ID is unknown")
		return
	}
	self, err := newReachMember(ctx, "the member", r.id, r.kube)
	if err != nil {
		r.add(name, Fail, err.Error(), fix)
		return
	}
	members := []*reachMember{self}
	for _, p := range r.opts.Peers {
		m, err := peerMember(ctx, p)
		if err == nil && m.id == r.id {
			err = fmt.Errorf("context %s is the member itself (cluster ID %s)", p.Name, r.id)
		}
		if err != nil {
			r.add(name, Fail, err.Error(), "give the contexts of other members in --peer-contexts")
			return
		}
		if !slices.ContainsFunc(members, func(o *reachMember) bool { return o.id == m.id }) {
			members = append(members, m)
		}
	}
	// An error with crossings is the cleanup's: both are reported.
	crossings, err := probe(ctx, members, r.opts.ReachTimeout)
	if err != nil {
		r.add(name, Fail, err.Error(), fix)
	}
	nets := podNetworks{Nodes: map[string][]nodeRoute{}}
	if r.snapshot != nil {
		nets.Declared = map[string][]netip.Prefix{}
		for _, d := range r.snapshot.Declarations {
			nets.Declared[d.Cluster] = d.PodCIDRs
		}
	}
	for _, c := range crossings {
		if !c.Result.OK() {
			// Routes to name: the nodes' subnets of every member.
			for _, m := range members {
				nets.Nodes[m.id] = nodeRoutes(ctx, m.kube)
			}
			break
		}
	}
	for _, c := range crossings {
		check := nets.judge(c)
		r.add(check.Name, check.Result, check.Detail, check.Fix)
	}
}

func newReachMember(ctx context.Context, name, id string, kube kubernetes.Interface) (*reachMember, error) {
	image, err := verify.MCSDImage(ctx, kube, mcsdNamespace)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return &reachMember{name: name, id: id, kube: kube, image: image}, nil
}

func peerMember(ctx context.Context, p Peer) (*reachMember, error) {
	c, err := status.NewClients(p.Config)
	if err != nil {
		return nil, fmt.Errorf("context %s: %w", p.Name, err)
	}
	id, _, err := membership.ResolveClusterID(ctx, c.Kube, c.Dynamic, "")
	if err != nil {
		return nil, fmt.Errorf("context %s: %w", p.Name, err)
	}
	return newReachMember(ctx, "context "+p.Name, id, c.Kube)
}

// probe runs the probe pods: members[0]'s pod connects to every other
// member's probe, and every other member's pod to members[0]'s. It removes
// them before it returns.
func probe(ctx context.Context, members []*reachMember, timeout time.Duration) (crossings []crossing, err error) {
	if timeout <= 0 {
		timeout = DefaultReachTimeout
	}
	defer func() {
		if cerr := removeProbes(context.WithoutCancel(ctx), members); cerr != nil && err == nil {
			err = cerr
		}
	}()
	err = each(members, func(m *reachMember) error {
		pod := probePod(m, "serve", []string{"probe", "serve", "--listen=:" + strconv.Itoa(probePort), "--identity=" + m.id, "--datagrams"})
		pod.Spec.Containers[0].Ports = []corev1.ContainerPort{
			{Name: "probe", ContainerPort: probePort, Protocol: corev1.ProtocolTCP},
			{Name: "probe-udp", ContainerPort: probePort, Protocol: corev1.ProtocolUDP},
		}
		pod.Spec.Containers[0].ReadinessProbe = &corev1.Probe{
			ProbeHandler:  corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(probePort)}},
			PeriodSeconds: 1,
		}
		var err error
		if m.serve, err = m.create(ctx, pod); err != nil {
			return err
		}
		m.serve, err = m.await(ctx, m.serve, probeStart, func(p *corev1.Pod) bool { return podReady(p) && p.Status.PodIP != "" })
		return err
	})
	if err != nil {
		return nil, err
	}
	self, peers := members[0], members[1:]
	err = each(members, func(m *reachMember) error {
		targets := peers
		if m != self {
			targets = []*reachMember{self}
		}
		args := []string{"probe", "check", "--timeout=" + timeout.String(), "--interval=500ms", "--datagrams"}
		var addrs []string
		for _, t := range targets {
			addr := probeAddress(t)
			args = append(args, "--expect="+addr+"="+t.id)
			addrs = append(addrs, addr)
		}
		var err error
		if m.check, err = m.create(ctx, probePod(m, "check", append(args, addrs...))); err != nil {
			return err
		}
		m.check, err = m.await(ctx, m.check, probeStart+timeout, func(p *corev1.Pod) bool {
			return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
		})
		return err
	})
	if err != nil {
		return nil, err
	}
	for _, m := range peers {
		out, err := readCrossing(ctx, self, m)
		if err != nil {
			return nil, err
		}
		back, err := readCrossing(ctx, m, self)
		if err != nil {
			return nil, err
		}
		crossings = append(crossings, out, back)
	}
	return crossings, nil
}

// readCrossing reads what from's check found of to's probe.
func readCrossing(ctx context.Context, from, to *reachMember) (crossing, error) {
	c := crossing{From: end(from, from.check), To: end(to, to.serve), Port: probePort}
	results, err := readLog(ctx, from, from.check, verify.ParseResults)
	if err != nil {
		return c, err
	}
	r, ok := results[probeAddress(to)]
	if !ok {
		r = verify.Result{Target: probeAddress(to), Error: "the check pod reported nothing"}
	}
	c.Result = r
	datagrams, err := readLog(ctx, to, to.serve, verify.ParseDatagrams)
	if err != nil {
		return c, err
	}
	for _, d := range datagrams {
		if d.Payload != from.check.Name {
			continue
		}
		c.Arrived = true
		if ap, err := netip.ParseAddrPort(d.From); err == nil {
			c.ArrivedFrom = ap.Addr().Unmap()
		}
	}
	return c, nil
}

func end(m *reachMember, p *corev1.Pod) probeEnd {
	ip, _ := netip.ParseAddr(p.Status.PodIP)
	return probeEnd{Cluster: m.id, IP: ip, Node: p.Spec.NodeName}
}

// probeAddress is where m's probe listens: its pod IP and port.
func probeAddress(m *reachMember) string {
	return net.JoinHostPort(m.serve.Status.PodIP, strconv.Itoa(probePort))
}

// nodeRoutes are the nodes of a member with their pod subnets; none when
// they cannot be listed.
func nodeRoutes(ctx context.Context, kube kubernetes.Interface) []nodeRoute {
	nodes, err := kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil
	}
	var routes []nodeRoute
	for _, n := range nodes.Items {
		for _, a := range n.Status.Addresses {
			ip, err := netip.ParseAddr(a.Address)
			if a.Type != corev1.NodeInternalIP || err != nil {
				continue
			}
			nr := nodeRoute{Node: n.Name, IP: ip}
			for _, c := range n.Spec.PodCIDRs {
				if p, err := netip.ParsePrefix(c); err == nil && p.Addr().Is4() == ip.Is4() {
					nr.Subnets = append(nr.Subnets, p.Masked())
				}
			}
			routes = append(routes, nr)
		}
	}
	return routes
}
