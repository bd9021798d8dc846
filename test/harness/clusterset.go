// Package harness starts real Kubernetes control planes on loopback — a
// broker and N member clusters, each with its own etcd, kube-apiserver and
// kube-controller-manager — plus a flat pod network of Linux network
// namespaces, so controllers, DNS and the proxier are tested against real
// parts. It needs root, iproute2 and Debian's etcd; it builds the pinned
// Kubernetes components on first use. Production code must not import it.
package harness

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/klog/v2"

	"github.com/mcsd-io/mcsd/test/testenv"
)

// Options says what to start.
type Options struct {
	// Clusters is the number of member clusters besides the broker
	// (default 2).
	Clusters int
}

// ClusterSet is a running broker and its member clusters.
type ClusterSet struct {
	Broker  *Cluster
	Members []*Cluster
	Network *Network
	// Dir holds logs, kubeconfigs and data of this run.
	Dir string

	runID     string
	closeOnce sync.Once

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
	if removed, err := CleanStale(); err != nil {
		return nil, fmt.Errorf("cleaning leftovers of earlier runs: %w", err)
	} else if len(removed) > 0 {
		klog.InfoS("Removed leftovers of a dead harness run", "removed", removed)
	}
	bins, err := findBinaries()
	if err != nil {
		return nil, err
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
	for i := 0; i <= opts.Clusters; i++ {
		name := fmt.Sprintf("cluster%d", i)
		if i == 0 {
			name = "broker"
		}
		c := &Cluster{
			Name:        name,
			Index:       i,
			ServiceCIDR: netip.PrefixFrom(netip.AddrFrom4([4]byte{100, byte(96 + i), 0, 0}), 16),
			PodCIDR:     netip.PrefixFrom(netip.AddrFrom4([4]byte{100, byte(64 + i), 0, 0}), 16),
			dir:         filepath.Join(cs.Dir, name),
			ca:          ca,
			bins:        bins,
			network:     cs.Network,
		}
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
	if err := cs.writeEnv(); err != nil {
		cs.Close()
		return nil, err
	}
	return cs, nil
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
		if os.Getenv("MCSD_HARNESS_KEEP") == "" {
			_ = os.RemoveAll(cs.Dir)
		}
	})
}
