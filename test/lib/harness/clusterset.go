// Package harness starts real Kubernetes control planes on loopback — a
// broker and N member clusters, each with its own etcd, kube-apiserver and
// kube-controller-manager — plus a flat pod network of Linux network
// namespaces, so controllers, DNS and the proxier are tested against real
// parts; with Options.RealNodes, real kubelet nodes too (realnode.go). It
// needs root, iproute2 and Debian's etcd (and for real nodes runc and the
// CNI plugins); it builds the pinned Kubernetes components and containerd
// on first use. Production code must not import it.
package harness

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/mcsd-io/mcsd/test/lib/images"
	"github.com/mcsd-io/mcsd/test/lib/netns"
	"github.com/mcsd-io/mcsd/test/lib/testenv"
)

// Options says what to start.
type Options struct {
	// Clusters is the number of member clusters besides the broker
	// (default 2).
	Clusters int
	// IPFamilies of every member cluster: IPv4Only (the default),
	// DualStack or IPv6Only, in the order the cluster prefers them. They
	// decide the API server's service ranges and the addresses of nodes
	// and pods. The broker, which runs no pods, is always IPv4Only.
	IPFamilies []corev1.IPFamily
	// MemberIPFamilies, when set, gives member i (cluster<i+1>) its own IP
	// families, for a clusterset that mixes single-stack IPv4 and IPv6
	// clusters; members it does not cover take IPFamilies.
	MemberIPFamilies [][]corev1.IPFamily
	// RealNodes gives every member cluster Nodes real nodes (default 1):
	// a kubelet, containerd and kube-proxy each (realnode.go), with a
	// kube-scheduler per cluster. Clusters stay IPv4-only; the API servers
	// are reached from nodes and pods through the run's gateway
	// (gateway.go). Without it a cluster has no node until a test adds
	// harness nodes (AddNode).
	RealNodes bool
	Nodes     int
}

// ClusterSet is a running broker and its member clusters.
type ClusterSet struct {
	Broker  *Cluster
	Members []*Cluster
	Network *Network
	// Operator, in runs with real nodes, is a network namespace on the
	// fabric standing in for an operator's machine: from there each
	// cluster's GatewayKubeconfigPath reaches its API server, and the
	// broker is reached at the address members were given (the test's own
	// network reaches neither).
	Operator *netns.NS
	// Dir holds logs, kubeconfigs and data of this run.
	Dir string

	runID     string
	closeOnce sync.Once
	// realNodes says the run starts kubelets (cgroups, kernel tunables).
	realNodes bool

	programsMu sync.Mutex
	programs   []*process
}

// All returns the broker followed by the members.
func (cs *ClusterSet) All() []*Cluster { return append([]*Cluster{cs.Broker}, cs.Members...) }

// Start brings up a ClusterSet for a test and tears it down in t.Cleanup.
// It skips under -short and fails when not root.
func Start(t testing.TB, opts Options) *ClusterSet {
	t.Helper()
	testenv.RequireRoot(t)
	testenv.RequireCommands(t, "ip", "etcd", "sysctl")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	began := time.Now()
	cs, err := Up(ctx, opts)
	if err != nil {
		t.Fatalf("starting the harness: %v", err)
	}
	t.Cleanup(cs.Close)
	t.Logf("harness: broker + %d clusters ready in %v (state in %s)", len(cs.Members), time.Since(began).Round(10*time.Millisecond), cs.Dir)
	return cs
}

// Up starts a ClusterSet. The caller must Close it. Leftovers of earlier runs
// whose owner died are cleaned first.
func Up(ctx context.Context, opts Options) (*ClusterSet, error) {
	if opts.Clusters <= 0 {
		opts.Clusters = 2
	}
	if opts.Clusters > 30 {
		return nil, fmt.Errorf("at most 30 member clusters, asked for %d", opts.Clusters)
	}
	if len(opts.IPFamilies) == 0 {
		opts.IPFamilies = IPv4Only
	}
	if err := checkFamilies(opts.IPFamilies); err != nil {
		return nil, err
	}
	for _, f := range opts.MemberIPFamilies {
		if err := checkFamilies(f); err != nil {
			return nil, err
		}
	}
	if removed, err := CleanStale(); err != nil {
		return nil, fmt.Errorf("cleaning leftovers of earlier runs: %w", err)
	} else if len(removed) > 0 {
		klog.InfoS("Removed leftovers of a dead harness run", "removed", removed)
	}
	bins, err := findBinaries()
	if err != nil {
		return nil, err
	}
	var nodeBins nodeBinaries
	var pause images.Image
	if opts.RealNodes {
		if opts.Nodes <= 0 {
			opts.Nodes = 1
		}
		if !slices.Equal(opts.IPFamilies, IPv4Only) || len(opts.MemberIPFamilies) > 0 {
			return nil, fmt.Errorf("real nodes are IPv4-only; asked for %v %v", opts.IPFamilies, opts.MemberIPFamilies)
		}
		if nodeBins, err = findNodeBinaries(); err != nil {
			return nil, err
		}
		if pause, err = images.Pause(ctx); err != nil {
			return nil, fmt.Errorf("building the pause image: %w", err)
		}
	}
	ca, err := newAuthority()
	if err != nil {
		return nil, err
	}
	runID := newRunID()
	cs := &ClusterSet{runID: runID, Dir: filepath.Join(StateBase(), runID)}
	if err := os.MkdirAll(cs.Dir, 0o700); err != nil {
		return nil, err
	}
	if cs.Network, err = newNetwork(runID); err != nil {
		cs.Close()
		return nil, err
	}
	var gw *gateway
	if opts.RealNodes {
		if gw, err = cs.Network.openGateway(filepath.Join(cs.Dir, "egress.sock")); err != nil {
			cs.Close()
			return nil, err
		}
		if cs.Operator, err = cs.Network.addOperator(); err != nil {
			cs.Close()
			return nil, err
		}
		if err := saveKernelTunables(cs.Dir); err != nil {
			cs.Close()
			return nil, err
		}
		cs.realNodes = true
	}
	for i := 0; i <= opts.Clusters; i++ {
		name := fmt.Sprintf("cluster%d", i)
		if i == 0 {
			name = "broker"
		}
		families := opts.IPFamilies
		switch {
		case i == 0:
			families = IPv4Only
		case i-1 < len(opts.MemberIPFamilies):
			families = opts.MemberIPFamilies[i-1]
		}
		c := &Cluster{
			Name:       name,
			Index:      i,
			IPFamilies: slices.Clone(families),
			dir:        filepath.Join(cs.Dir, name),
			ca:         ca,
			bins:       bins,
			network:    cs.Network,
			gateway:    gw,
			real:       opts.RealNodes && i > 0,
			nodeBins:   nodeBins,
		}
		for _, f := range families {
			if f == corev1.IPv6Protocol {
				c.ServiceCIDRs = append(c.ServiceCIDRs, serviceCIDRv6(i))
				c.PodCIDRs = append(c.PodCIDRs, podCIDRv6(i))
			} else {
				c.ServiceCIDRs = append(c.ServiceCIDRs, serviceCIDRv4(i))
				c.PodCIDRs = append(c.PodCIDRs, podCIDRv4(i))
			}
		}
		c.ServiceCIDR, c.PodCIDR = c.ServiceCIDRs[0], c.PodCIDRs[0]
		if i == 0 {
			cs.Broker = c
		} else {
			cs.Members = append(cs.Members, c)
		}
	}

	errs := make([]error, opts.Clusters+1)
	var wg sync.WaitGroup
	for i, c := range cs.All() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = c.startWithRetries(ctx)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			cs.Close()
			return nil, err
		}
	}
	if opts.RealNodes {
		if err := cs.startRealNodes(ctx, opts.Nodes, pause); err != nil {
			cs.Close()
			return nil, err
		}
	}
	if err := cs.writeEnv(); err != nil {
		cs.Close()
		return nil, err
	}
	return cs, nil
}

// startRealNodes gives every member n real nodes, started together.
func (cs *ClusterSet) startRealNodes(ctx context.Context, n int, pause images.Image) error {
	var nodes []*RealNode
	for _, c := range cs.Members {
		for range n {
			node, err := c.newRealNode(cs.runID)
			if err != nil {
				return err
			}
			nodes = append(nodes, node)
		}
	}
	run := runCgroup(cs.runID)
	if err := makeCgroup(run, []string{"cpu"}); err != nil {
		return err
	}
	for _, rel := range []string{"/" + cgroupGroup, run} {
		if err := weighCPU(rel, nodeCPUShares()*len(nodes)); err != nil {
			return err
		}
	}
	return onEach(nodes, func(node *RealNode) error {
		if err := node.start(ctx, pause); err != nil {
			return fmt.Errorf("starting node %s: %w", node.Name, err)
		}
		return nil
	})
}

// onEach runs fn on each node at once and joins their errors.
func onEach(nodes []*RealNode, fn func(*RealNode) error) error {
	errs := make([]error, len(nodes))
	var wg sync.WaitGroup
	for i, node := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = fn(node)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// RealNodes are the real nodes of every member, cluster by cluster.
func (cs *ClusterSet) RealNodes() []*RealNode {
	var out []*RealNode
	for _, c := range cs.Members {
		out = append(out, c.realNodes...)
	}
	return out
}

// ImportImage imports an image into every real node's containerd.
func (cs *ClusterSet) ImportImage(ctx context.Context, img images.Image) error {
	return onEach(cs.RealNodes(), func(n *RealNode) error { return n.ImportImage(ctx, img) })
}

// writeEnv writes <Dir>/env, shell exports of every cluster's kubeconfig,
// for people and scripts (`clusterset env`).
func (cs *ClusterSet) writeEnv() error {
	var b strings.Builder
	for _, c := range cs.All() {
		fmt.Fprintf(&b, "export KUBECONFIG_%s=%s\n", strings.ToUpper(c.Name), c.KubeconfigPath)
	}
	return os.WriteFile(filepath.Join(cs.Dir, "env"), []byte(b.String()), 0o644)
}

// Close stops every process and deletes every namespace and file of the run.
func (cs *ClusterSet) Close() {
	cs.closeOnce.Do(func() {
		// Programs first: they talk to the control planes as they stop.
		cs.programsMu.Lock()
		for _, p := range cs.programs {
			p.stop()
		}
		cs.programsMu.Unlock()
		// Real nodes next: their pods and daemons go with their cgroups.
		if err := onEach(cs.RealNodes(), (*RealNode).stop); err != nil {
			klog.ErrorS(err, "Stopping the real nodes")
		}
		if cs.realNodes {
			if _, err := killCgroup(runCgroup(cs.runID)); err != nil {
				klog.ErrorS(err, "Removing the cgroups of the run")
			}
			removeCgroupGroup()
		}
		if cs.Network != nil {
			cs.Network.close()
		}
		var wg sync.WaitGroup
		for _, c := range cs.All() {
			if c == nil {
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				c.stop()
			}()
		}
		wg.Wait()
		if cs.realNodes {
			if _, err := restoreKernelTunables(cs.runID); err != nil {
				klog.ErrorS(err, "Restoring the kernel tunables kubelets change")
			}
		}
		if os.Getenv("MCSD_HARNESS_KEEP") == "" {
			_ = os.RemoveAll(cs.Dir)
		}
	})
}
