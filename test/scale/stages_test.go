package scale

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/mcsd-io/mcsd/internal/record"
	"github.com/mcsd-io/mcsd/mcsslice"
	"github.com/mcsd-io/mcsd/test/lib/fixture"
)

// stage is one step of a bulk export, as the API servers show it.
type stage int

const (
	// stageRecord: the exporter's record is on the broker (the broker's
	// admission passed it).
	stageRecord stage = iota
	// stageBrokerSlice: the exporter's EndpointSlice is on the broker.
	stageBrokerSlice
	// stageImport: the member's ServiceImport exists (the importer saw the
	// record and wrote it).
	stageImport
	// stageStatus: the ServiceImport names the exporting cluster in its
	// status and carries a ClusterSetIP.
	stageStatus
	// stageSlice: the member's MCS EndpointSlice exists.
	stageSlice
	// stageDNS: the member's node answers the service's name with its
	// ClusterSetIP (which it does only once its proxier carries it).
	stageDNS
	stages
)

var stageNames = [stages]string{
	stageRecord:      "record on the broker",
	stageBrokerSlice: "slice on the broker",
	stageImport:      "ServiceImport written",
	stageStatus:      "status written",
	stageSlice:       "slice written",
	stageDNS:         "DNS answers",
}

// tracker notes when each service of a bulk export reached each stage in
// each member cluster (the broker's stages under cluster "broker"), from
// watches started before the export: the time the watch event arrived.
// The watches start from the API server's cache (resource version "0"),
// which sends what exists first; a watch from "now" waits for the cache
// to catch up with etcd and may time out on a quiet resource.
type tracker struct {
	names map[string]bool

	mu sync.Mutex
	// errs are the watches' errors.
	errs []string
	seen map[string]map[string]*[stages]time.Time // cluster -> service -> times
}

func newTracker(names []string) *tracker {
	t := &tracker{names: map[string]bool{}, seen: map[string]map[string]*[stages]time.Time{}}
	for _, n := range names {
		t.names[n] = true
	}
	return t
}

// note records the first time service reached st in cluster.
func (t *tracker) note(cluster, service string, st stage, at time.Time) {
	if !t.names[service] {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	byService := t.seen[cluster]
	if byService == nil {
		byService = map[string]*[stages]time.Time{}
		t.seen[cluster] = byService
	}
	times := byService[service]
	if times == nil {
		times = &[stages]time.Time{}
		byService[service] = times
	}
	if times[st].IsZero() {
		times[st] = at
	}
}

// reached reports whether every service reached st in every cluster.
func (t *tracker) reached(clusters []string, st stage) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, c := range clusters {
		for n := range t.names {
			times := t.seen[c][n]
			if times == nil || times[st].IsZero() {
				return false
			}
		}
	}
	return true
}

// pending returns the services that have not reached st in cluster.
func (t *tracker) pending(cluster string, st stage) []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []string
	for n := range t.names {
		times := t.seen[cluster][n]
		if times == nil || times[st].IsZero() {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

// missing says, per cluster, how many services have not reached each of
// sts yet.
func (t *tracker) missing(clusters []string, sts ...stage) string {
	var parts []string
	for _, c := range clusters {
		for _, st := range sts {
			if n := len(t.pending(c, st)); n > 0 {
				parts = append(parts, fmt.Sprintf("%s: %d without %q", c, n, stageNames[st]))
			}
		}
	}
	t.mu.Lock()
	parts = append(parts, t.errs...)
	t.mu.Unlock()
	return strings.Join(parts, ", ")
}

// latest is when service reached st in the last of clusters (zero if it
// did not in one of them).
func (t *tracker) latest(clusters []string, service string, st stage) time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	var last time.Time
	for _, c := range clusters {
		times := t.seen[c][service]
		if times == nil || times[st].IsZero() {
			return time.Time{}
		}
		if times[st].After(last) {
			last = times[st]
		}
	}
	return last
}

// watchBroker notes the exporter's records and slices of namespace in the
// member namespace ns of the broker.
func (t *tracker) watchBroker(ctx context.Context, clients clientsOf, ns, namespace string) error {
	sel := record.LabelServiceNamespace + "=" + namespace
	records, err := clients.mcs.MulticlusterV1beta1().ServiceImports(ns).Watch(ctx, metav1.ListOptions{LabelSelector: sel, ResourceVersion: "0"})
	if err != nil {
		return fmt.Errorf("watching the broker's records: %w", err)
	}
	sliceWatch, err := clients.kube.DiscoveryV1().EndpointSlices(ns).Watch(ctx, metav1.ListOptions{LabelSelector: sel, ResourceVersion: "0"})
	if err != nil {
		records.Stop()
		return fmt.Errorf("watching the broker's slices: %w", err)
	}
	go t.consume(records, func(obj any, at time.Time) {
		if r, ok := obj.(*mcsv1beta1.ServiceImport); ok {
			t.note("broker", r.Labels[record.LabelServiceName], stageRecord, at)
		}
	})
	go t.consume(sliceWatch, func(obj any, at time.Time) {
		if s, ok := obj.(*discoveryv1.EndpointSlice); ok {
			t.note("broker", s.Labels[record.LabelServiceName], stageBrokerSlice, at)
		}
	})
	return nil
}

// watchMember notes a member's ServiceImports, their status naming
// exporter, and its MCS EndpointSlices, in namespace.
func (t *tracker) watchMember(ctx context.Context, cluster string, clients clientsOf, namespace, exporter string) error {
	imports, err := clients.mcs.MulticlusterV1beta1().ServiceImports(namespace).Watch(ctx, metav1.ListOptions{ResourceVersion: "0"})
	if err != nil {
		return fmt.Errorf("watching the ServiceImports of %s: %w", cluster, err)
	}
	sliceWatch, err := clients.kube.DiscoveryV1().EndpointSlices(namespace).Watch(ctx, metav1.ListOptions{
		LabelSelector: mcsslice.Selector, ResourceVersion: "0",
	})
	if err != nil {
		imports.Stop()
		return fmt.Errorf("watching the MCS EndpointSlices of %s: %w", cluster, err)
	}
	go t.consume(imports, func(obj any, at time.Time) {
		si, ok := obj.(*mcsv1beta1.ServiceImport)
		if !ok {
			return
		}
		t.note(cluster, si.Name, stageImport, at)
		if len(si.Spec.IPs) > 0 && slices.ContainsFunc(si.Status.Clusters, func(c mcsv1beta1.ClusterStatus) bool { return c.Cluster == exporter }) {
			t.note(cluster, si.Name, stageStatus, at)
		}
	})
	go t.consume(sliceWatch, func(obj any, at time.Time) {
		if s, ok := obj.(*discoveryv1.EndpointSlice); ok {
			t.note(cluster, s.Labels[mcsv1beta1.LabelServiceName], stageSlice, at)
		}
	})
	return nil
}

// track follows the services names of namespace until ctx ends: on the
// broker (the first member's records and slices) and in every member. It
// returns the tracker and the members' IDs.
func track(ctx context.Context, brokerAdmin clientsOf, members []*fixture.Member, namespace string, names []string) (*tracker, []string, error) {
	t := newTracker(names)
	exporter := members[0]
	if err := t.watchBroker(ctx, brokerAdmin, exporter.BrokerNamespace(), namespace); err != nil {
		return nil, nil, err
	}
	var clusters []string
	for _, m := range members {
		clusters = append(clusters, m.ID)
		if err := t.watchMember(ctx, m.ID, clientsOf{m.Kube, m.MCS}, namespace, exporter.ID); err != nil {
			return nil, nil, err
		}
	}
	return t, clusters, nil
}

// consume hands every added or modified object of w to note until w ends.
func (t *tracker) consume(w watch.Interface, note func(obj any, at time.Time)) {
	for ev := range w.ResultChan() {
		switch ev.Type {
		case watch.Added, watch.Modified:
			note(ev.Object, time.Now())
		case watch.Error:
			t.mu.Lock()
			t.errs = append(t.errs, fmt.Sprintf("%v", ev.Object))
			t.mu.Unlock()
		}
	}
}
