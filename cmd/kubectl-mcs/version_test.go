package main

import (
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcsd-io/mcsd/exporter"
	"github.com/mcsd-io/mcsd/internal/record"
	"github.com/mcsd-io/mcsd/internal/version"
	"github.com/mcsd-io/mcsd/test/lib/fixture"
	"github.com/mcsd-io/mcsd/test/lib/harness"
)

// version reads each member's mcsd version from its heartbeat Lease and
// warns of a skew beyond the supported one.
func TestVersionWarnsOfSkew(t *testing.T) {
	if testing.Short() {
		t.Skip("runs API servers")
	}
	cs := harness.Start(t, harness.Options{Clusters: 2})
	members := fixture.Join(t, cs)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	mcs := cli{t: t, kubeconfig: mergedKubeconfig(t, cs)}

	// heartbeats renew each member's Lease as mcsd of the given versions
	// does, until the returned function stops them.
	heartbeats := func(versions ...string) func() {
		hctx, stop := context.WithCancel(ctx)
		done := make(chan struct{}, len(members))
		for i, m := range members {
			h := &exporter.Heartbeat{Broker: m.BrokerKube, Namespace: m.BrokerNamespace(), Name: record.LeaseName(m.ID), ClusterID: m.ID,
				Duration: 10 * time.Second, Interval: 200 * time.Millisecond, Version: versions[i]}
			go func() { h.Run(hctx); done <- struct{}{} }()
		}
		return func() {
			stop()
			for range members {
				<-done
			}
		}
	}
	read := func(args ...string) (versions, string) {
		t.Helper()
		out, errOut, err := mcs.run(ctx, append([]string{"version", "-o", "json"}, args...)...)
		if err != nil {
			t.Fatalf("version: %v\n%s%s", err, out, errOut)
		}
		var doc versions
		if err := json.Unmarshal([]byte(out), &doc); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		return doc, errOut
	}
	// waitFor reads until every member shows its version.
	waitFor := func(want ...string) versions {
		t.Helper()
		var doc versions
		eventually(ctx, t, "every member's version "+strings.Join(want, ", "), func() bool {
			doc, _ = read("--broker-context", "broker")
			if len(doc.Members) != len(want) {
				return false
			}
			for i, m := range doc.Members {
				if m.Cluster != members[i].ID || m.Version != want[i] {
					return false
				}
			}
			return true
		})
		return doc
	}

	t.Run("members one minor version apart are within the supported skew", func(t *testing.T) {
		stop := heartbeats("v0.3.1", "v0.2.0")
		defer stop()
		doc := waitFor("v0.3.1", "v0.2.0")
		if len(doc.Warnings) != 0 {
			t.Fatalf("warned %q", doc.Warnings)
		}
		if doc.Client.Version != version.Get().Version {
			t.Fatalf("client %+v, want %s", doc.Client, version.Get().Version)
		}
	})
	t.Run("members two minor versions apart are warned of, naming the oldest and the newest", func(t *testing.T) {
		stop := heartbeats("v0.3.1", "v0.1.0")
		defer stop()
		waitFor("v0.3.1", "v0.1.0")
		table, errOut, err := mcs.run(ctx, "version", "--broker-context", "broker")
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"Client: " + version.Get().Version, "CLUSTER", members[0].ID, "v0.3.1", members[1].ID, "v0.1.0"} {
			if !strings.Contains(table, want) {
				t.Errorf("version table lacks %q:\n%s", want, table)
			}
		}
		want := "warning: " + members[1].ID + " runs v0.1.0 and " + members[0].ID + " runs v0.3.1: more than the supported skew"
		if !strings.Contains(errOut, want) {
			t.Errorf("version warned %q, want %q", errOut, want)
		}
		t.Logf("kubectl mcs version:\n%s%s", table, errOut)
	})
	t.Run("the Makefile's stamp is the client's version", func(t *testing.T) {
		bin := filepath.Join(t.TempDir(), "kubectl-mcs")
		pkg := "github.com/mcsd-io/mcsd/internal/version"
		build := exec.CommandContext(ctx, "go", "build", "-ldflags", "-X "+pkg+".version=v9.8.7-test -X "+pkg+".revision=0123abcd", "-o", bin, ".")
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("building kubectl-mcs: %v\n%s", err, out)
		}
		out, err := exec.CommandContext(ctx, bin, "version", "--client").CombinedOutput()
		if err != nil || !strings.Contains(string(out), "Client: v9.8.7-test (revision 0123abcd") {
			t.Fatalf("version --client: %v\n%s", err, out)
		}
	})
	t.Run("--client reads no broker", func(t *testing.T) {
		doc, _ := read("--client", "--context", "nonexistent")
		if doc.Client.Version == "" || len(doc.Members) != 0 {
			t.Fatalf("version --client: %+v", doc)
		}
	})
}
