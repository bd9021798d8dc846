// Command clusterset runs the test harness by hand: a broker and member
// clusters of real Kubernetes control planes on loopback.
//
//	clusterset up [--clusters=N] [--real-nodes=M]
//	                               start, print how to use it, stay up until Ctrl-C
//	clusterset env                 print the kubeconfig exports of the running set
//	clusterset down                stop a running set and clean leftovers of dead ones
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/mcsd-io/mcsd/test/lib/harness"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	switch os.Args[1] {
	case "up":
		err = up(os.Args[2:])
	case "env":
		err = env()
	case "down":
		err = down()
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "clusterset:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: clusterset up [--clusters=N] [--real-nodes=M] | env | down")
	os.Exit(2)
}

func up(args []string) error {
	fs := flag.NewFlagSet("up", flag.ExitOnError)
	clusters := fs.Int("clusters", 2, "number of member clusters besides the broker")
	nodes := fs.Bool("nodes", true, "give each member cluster one node for pods")
	realNodes := fs.Int("real-nodes", 0, "give each member cluster this many real nodes (kubelet, containerd, kube-proxy) instead")
	_ = fs.Parse(args)
	if *clusters < 1 {
		return fmt.Errorf("--clusters must be at least 1, got %d", *clusters)
	}
	if *realNodes < 0 {
		return fmt.Errorf("--real-nodes must not be negative, got %d", *realNodes)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	began := time.Now()
	fmt.Printf("Starting a broker and %d member clusters (etcd + kube-apiserver + kube-controller-manager each)...\n", *clusters)
	cs, err := harness.Up(ctx, harness.Options{Clusters: *clusters, RealNodes: *realNodes > 0, Nodes: *realNodes})
	if err != nil {
		return err
	}
	defer cs.Close()
	for _, n := range cs.RealNodes() {
		fmt.Printf("  real node %s: network namespace %s, address %s, pod subnet %s, logs in %s\n", n.Name, n.NS.Name, n.IP, n.PodSubnet, n.Dir)
	}
	if *nodes && *realNodes == 0 {
		for _, c := range cs.Members {
			n, err := c.AddNode(ctx)
			if err != nil {
				return err
			}
			fmt.Printf("  node %s: network namespace %s, address %s, pod subnet %s\n", n.Name, n.NS.Name, n.IP, n.PodSubnet)
		}
	}
	fmt.Printf("Ready in %v.\n\n", time.Since(began).Round(10*time.Millisecond))
	for _, c := range cs.All() {
		fmt.Printf("  %-9s %s  service CIDR %s  kubeconfig %s\n", c.Name, c.Server(), c.ServiceCIDR, c.KubeconfigPath)
	}
	fmt.Printf("\nUse them:\n  eval \"$(go run ./test/cmd/clusterset env)\"\n  kubectl --kubeconfig \"$KUBECONFIG_CLUSTER1\" get namespaces\n\nLogs are in %s. Press Ctrl-C to stop and clean up.\n", cs.Dir)
	<-ctx.Done()
	fmt.Println("\nStopping and cleaning up...")
	return nil
}

// liveRuns returns the state directories of runs whose owner still runs.
func liveRuns() ([]string, error) {
	base := harness.StateBase()
	entries, err := os.ReadDir(base)
	if err != nil && !os.IsNotExist(err) {
		return nil, err
	}
	var dirs []string
	for _, e := range entries {
		if pid, ok := harness.OwnerPID(e.Name()); ok && syscall.Kill(pid, 0) == nil {
			dirs = append(dirs, filepath.Join(base, e.Name()))
		}
	}
	return dirs, nil
}

func env() error {
	dirs, err := liveRuns()
	if err != nil {
		return err
	}
	if len(dirs) == 0 {
		return errors.New("no clusterset is running; start one with `clusterset up`")
	}
	data, err := os.ReadFile(filepath.Join(dirs[len(dirs)-1], "env"))
	if err != nil {
		return err
	}
	fmt.Print(string(data))
	return nil
}

func down() error {
	dirs, err := liveRuns()
	if err != nil {
		return err
	}
	for _, dir := range dirs {
		pid, _ := harness.OwnerPID(filepath.Base(dir))
		if pid == os.Getpid() {
			continue
		}
		fmt.Printf("stopping run %s (pid %d)\n", filepath.Base(dir), pid)
		_ = syscall.Kill(pid, syscall.SIGTERM)
		for i := 0; i < 100 && syscall.Kill(pid, 0) == nil; i++ {
			time.Sleep(100 * time.Millisecond)
		}
	}
	removed, err := harness.CleanStale()
	if len(removed) > 0 {
		fmt.Println("removed:", strings.Join(removed, ", "))
	}
	return err
}
