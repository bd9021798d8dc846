package e2e_test

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/mcsd-io/mcsd/broker"
	"github.com/mcsd-io/mcsd/internal/record"
	"github.com/mcsd-io/mcsd/test/lib/echo"
	"github.com/mcsd-io/mcsd/test/lib/fixture"
	"github.com/mcsd-io/mcsd/test/lib/harness"
	"github.com/mcsd-io/mcsd/test/lib/hold"
)

// The attacks that precedence and namespace sameness leave open where no
// export rule names a namespace's owners, each tried by cluster3 against
// namespace kept, whose rule (named after it, as `kubectl mcs broker
// export-rules set kept --members cluster1,cluster2` writes it) lists
// cluster1 and cluster2 but not cluster3. Each must be refused by the
// broker's admission, by the export-rules policy, with cluster1's service
// of kept exactly as cluster1 exports it.

// keptNamespace is cluster1's and cluster2's alone by an export rule.
const keptNamespace = "kept"

func init() {
	siteAttacks = append(siteAttacks,
		siteAttack{"presquat: export kept/api before its owner, from 1970, with ClientIP affinity, its own port and VIP", presquat},
		siteAttack{"reexport-takeover: hold kept/api while its owner re-exports it", reexportTakeover},
		siteAttack{"tie-race: export kept/tie-N in the same instant as its owner, 3 times", tieRace},
		siteAttack{"service-join: export kept/api alongside its owner, with endpoints", serviceJoin},
	)
}

// keptSites are the sites whose namespace kept is set up, each once.
var keptSites = map[*attackSite]bool{}

// kept sets up, once per site, namespace kept in every member, a web pod
// of cluster1 there, and the export rule keeping it to cluster1 and
// cluster2; it returns once the broker enforces the rule.
func (s *attackSite) kept(t *testing.T) {
	t.Helper()
	if keptSites[s] {
		return
	}
	for _, m := range []*fixture.Member{s.victim, s.bystand, s.attacker} {
		createFaultNamespace(t, s.ctx, m.Cluster, keptNamespace)
	}
	if _, err := s.daemons[0].Node.AddPod(s.ctx, harness.PodSpec{Namespace: keptNamespace, Name: "web", Labels: map[string]string{"app": "web"}}); err != nil {
		t.Fatal(err)
	}
	rule := broker.NewExportRule(keptNamespace, keptNamespace, s.victim.ID+","+s.bystand.ID)
	if err := broker.SetExportRule(s.ctx, s.cs.Broker.Config, broker.DefaultNamespace, rule); err != nil {
		t.Fatal(err)
	}
	keptSites[s] = true
}

// refusedByRule fails t unless err is the export-rules policy's refusal
// of what, under the rule of namespace kept.
func refusedByRule(t *testing.T, what string, err error) {
	t.Helper()
	mustRefuse(t, what, err)
	if msg := err.Error(); !strings.Contains(msg, broker.ExportRulesPolicy) || !strings.Contains(msg, broker.ExportRuleName(keptNamespace)) {
		t.Fatalf("%s: refused, but not by %s for export rule %s: %v", what, broker.ExportRulesPolicy, broker.ExportRuleName(keptNamespace), err)
	}
}

// keptView is cluster1's service kept/name as the importing clusters see
// it.
type keptView struct {
	Clusters  []string
	Type      mcsv1beta1.ServiceImportType
	IPs       []string
	Ports     []mcsv1beta1.ServicePort
	Affinity  corev1.ServiceAffinity
	Endpoints map[string][]string // per importing cluster and source
}

func (s *attackSite) keptView(ctx context.Context, name string) (keptView, error) {
	v := keptView{Endpoints: map[string][]string{}}
	si, err := s.bystand.MCS.MulticlusterV1beta1().ServiceImports(keptNamespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return v, err
	}
	for _, c := range si.Status.Clusters {
		v.Clusters = append(v.Clusters, c.Cluster)
	}
	v.Type, v.IPs, v.Ports, v.Affinity = si.Spec.Type, si.Spec.IPs, si.Spec.Ports, si.Spec.SessionAffinity
	for _, m := range []*fixture.Member{s.victim, s.bystand} {
		eps, err := importedAddresses(ctx, m.Cluster, keptNamespace, name)
		if err != nil {
			return v, err
		}
		for src, addrs := range eps {
			slices.Sort(addrs)
			v.Endpoints[m.ID+"<-"+src] = addrs
		}
	}
	return v, nil
}

// ownersOnly says what is wrong with v, if anything, for cluster1's
// export of kept/name: cluster1 alone among its clusters, a ClusterSetIP
// of cluster1's block, cluster1's ports and affinity, and in both
// importing clusters the endpoints of cluster1 and no other.
func (s *attackSite) ownersOnly(v keptView) error {
	block := s.victim.Blocks[corev1.IPv4Protocol]
	var problems []string
	if !slices.Equal(v.Clusters, []string{s.victim.ID}) {
		problems = append(problems, fmt.Sprintf("clusters %v", v.Clusters))
	}
	if len(v.IPs) != 1 || !block.Contains(netip.MustParseAddr(v.IPs[0])) {
		problems = append(problems, fmt.Sprintf("ClusterSetIPs %v, not one of cluster1's block %s", v.IPs, block))
	}
	if v.Type != mcsv1beta1.ClusterSetIP || v.Affinity == corev1.ServiceAffinityClientIP ||
		!slices.Equal(v.Ports, []mcsv1beta1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}}) {
		problems = append(problems, fmt.Sprintf("type %s, affinity %s, ports %v", v.Type, v.Affinity, v.Ports))
	}
	want := []string{s.victim.ID + "<-" + s.victim.ID, s.bystand.ID + "<-" + s.victim.ID}
	if got := slices.Sorted(maps.Keys(v.Endpoints)); !slices.Equal(got, want) {
		problems = append(problems, fmt.Sprintf("endpoints %v", v.Endpoints))
	}
	if len(problems) > 0 {
		return fmt.Errorf("kept: %s", strings.Join(problems, "; "))
	}
	return nil
}

// ownersHold waits until cluster1's kept/name is imported as cluster1's
// alone, then holds that, unchanged, for attackHold; it returns the view.
func (s *attackSite) ownersHold(t *testing.T, name string) keptView {
	t.Helper()
	var v keptView
	var last error
	err := wait.PollUntilContextTimeout(s.ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		v, last = s.keptView(ctx, name)
		if last == nil {
			last = s.ownersOnly(v)
		}
		return last == nil, nil
	})
	if err != nil {
		t.Fatalf("kept/%s never became cluster1's alone: %v", name, last)
	}
	if err := hold.For(s.ctx, attackHold, 200*time.Millisecond, func(ctx context.Context) error {
		now, err := s.keptView(ctx, name)
		if err != nil {
			return err
		}
		if fmt.Sprint(now) != fmt.Sprint(v) {
			return fmt.Errorf("kept/%s changed from %+v to %+v", name, v, now)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return v
}

// noRecordOfAttacker fails t if the broker holds cluster3's record of
// kept/name.
func (s *attackSite) noRecordOfAttacker(t *testing.T, name string) {
	t.Helper()
	_, err := s.cs.Broker.MCS.MulticlusterV1beta1().ServiceImports(s.attacker.BrokerNamespace()).Get(s.ctx, record.Name(s.attacker.ID, keptNamespace, name), metav1.GetOptions{})
	if !apierrors.IsNotFound(err) {
		t.Fatalf("the broker holds cluster3's record of kept/%s: %v", name, err)
	}
}

// victimRecord waits until the broker holds cluster1's record of
// kept/name, or, with present false, holds none.
func (s *attackSite) victimRecord(ctx context.Context, name string, present bool) error {
	return wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := s.cs.Broker.MCS.MulticlusterV1beta1().ServiceImports(s.victim.BrokerNamespace()).Get(ctx, record.Name(s.victim.ID, keptNamespace, name), metav1.GetOptions{})
		if present {
			return err == nil, nil
		}
		return apierrors.IsNotFound(err), nil
	})
}

// presquat: before cluster1 exports kept/api, cluster3 exports it first,
// as the oldest export (created 1970), so that its ClientIP affinity, its
// port 8080 and a VIP of its own block would decide the service; with a
// slice of one endpoint of its pods. Then cluster1 exports kept/api.
func presquat(t *testing.T, s *attackSite) string {
	s.kept(t)
	refusedByRule(t, "cluster3's record of kept/api, before cluster1's", s.writeRecord(s.attackRecord(keptNamespace, "api", func(e *record.Export) {
		e.Created = metav1.NewTime(time.Date(1970, 1, 1, 0, 0, 0, 0, time.UTC))
		e.SessionAffinity = corev1.ServiceAffinityClientIP
		e.Ports = []mcsv1beta1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 8080}}
		e.VIPs = []string{nthAddr(s.attacker.Blocks[corev1.IPv4Protocol], 40).String()}
	})))
	refusedByRule(t, "cluster3's slice of kept/api, before cluster1's", s.writeSlice(s.attackSlice(keptNamespace, "api", nthAddr(s.attacker.PodCIDR, 40).String())))
	s.export(keptNamespace, "api", nil)
	v := s.ownersHold(t, "api")
	s.noRecordOfAttacker(t, "api")
	t.Logf("kept/api, exported by cluster1 after cluster3's presquat: %+v", v)
	return "broker (admission: export rule kept)"
}

// reexportTakeover: cluster3 tries to hold a record of kept/api while
// cluster1 exports it, then while cluster1 re-exports it (its
// ServiceExport deleted, its record gone from the broker, the
// ServiceExport created again), so that cluster3's record, older than
// cluster1's new one, would take the service over.
func reexportTakeover(t *testing.T, s *attackSite) string {
	s.kept(t)
	before := s.ownersHold(t, "api")
	squat := func() *mcsv1beta1.ServiceImport {
		return s.attackRecord(keptNamespace, "api", func(e *record.Export) {
			e.VIPs = []string{nthAddr(s.attacker.Blocks[corev1.IPv4Protocol], 41).String()}
		})
	}
	refusedByRule(t, "cluster3's record of kept/api, alongside cluster1's", s.writeRecord(squat()))
	exports := s.victim.MCS.MulticlusterV1beta1().ServiceExports(keptNamespace)
	if err := exports.Delete(s.ctx, "api", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := s.victimRecord(s.ctx, "api", false); err != nil {
		t.Fatalf("cluster1's record of kept/api stays on the broker after its ServiceExport went: %v", err)
	}
	refusedByRule(t, "cluster3's record of kept/api, while cluster1 re-exports", s.writeRecord(squat()))
	if _, err := exports.Create(s.ctx, &mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: keptNamespace, Name: "api"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := s.victimRecord(s.ctx, "api", true); err != nil {
		t.Fatalf("cluster1's record of kept/api after it exported it again: %v", err)
	}
	refusedByRule(t, "cluster3's record of kept/api, after cluster1 re-exported", s.writeRecord(squat()))
	after := s.ownersHold(t, "api")
	s.noRecordOfAttacker(t, "api")
	t.Logf("kept/api before cluster1 re-exported: %v; after: %v", before.IPs, after.IPs)
	return "broker (admission: export rule kept)"
}

// tieRace: cluster3 writes its record of kept/tie-N over and over (each
// write answered: they run on the site's context, not the race's) from
// just before cluster1 exports kept/tie-N until cluster1's record is on
// the broker, so that one of its records is created in the same second as
// cluster1's, a tie for the oldest export; three times.
func tieRace(t *testing.T, s *attackSite) string {
	s.kept(t)
	for i := range 3 {
		name := fmt.Sprintf("tie-%d", i)
		raceCtx, stop := context.WithCancel(s.ctx)
		var tries atomic.Int64
		var sent []time.Time // when each try was sent, on the race's goroutine
		results := make(chan error, 1)
		started := make(chan struct{})
		go func() {
			defer close(results)
			for raceCtx.Err() == nil {
				sent = append(sent, time.Now())
				err := s.writeRecord(s.attackRecord(keptNamespace, name, func(e *record.Export) {
					e.VIPs = []string{nthAddr(s.attacker.Blocks[corev1.IPv4Protocol], 50+i).String()}
				}))
				if tries.Add(1) == 1 {
					close(started)
				}
				if !refusedByBroker(err) || !strings.Contains(err.Error(), broker.ExportRuleName(keptNamespace)) {
					results <- fmt.Errorf("try %d: %v, want the refusal of export rule %s", tries.Load(), err, broker.ExportRuleName(keptNamespace))
					return
				}
			}
		}()
		<-started
		s.export(keptNamespace, name, nil)
		err := s.victimRecord(s.ctx, name, true)
		stop()
		if err != nil {
			t.Fatalf("cluster1's record of kept/%s: %v", name, err)
		}
		if err := <-results; err != nil {
			t.Fatalf("cluster3's record of kept/%s, raced with cluster1's: %v", name, err)
		}
		// Records are ordered by their creationTimestamp, to the second:
		// how many tries fell in the second of cluster1's record.
		theirs, err := s.cs.Broker.MCS.MulticlusterV1beta1().ServiceImports(s.victim.BrokerNamespace()).Get(s.ctx, record.Name(s.victim.ID, keptNamespace, name), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		second := theirs.CreationTimestamp.Time
		tied := 0
		for _, at := range sent {
			if at.Truncate(time.Second).Equal(second) {
				tied++
			}
		}
		t.Logf("kept/%s: cluster3's %d tries during cluster1's export refused, %d of them in the second of cluster1's record (%s)", name, tries.Load(), tied, second.Format(time.RFC3339))
		s.ownersHold(t, name)
		s.noRecordOfAttacker(t, name)
	}
	return "broker (admission: export rule kept)"
}

// serviceJoin: cluster3 exports kept/api exactly as cluster1 does (same
// type, ports, affinity), which namespace sameness would merge into one
// service, with a slice of one ready endpoint of its own pod CIDR, so
// that a share of kept/api's connections would go to cluster3.
func serviceJoin(t *testing.T, s *attackSite) string {
	s.kept(t)
	before := s.ownersHold(t, "api")
	refusedByRule(t, "cluster3's record of kept/api, as cluster1 exports it", s.writeRecord(s.attackRecord(keptNamespace, "api", func(e *record.Export) {
		e.VIPs = []string{nthAddr(s.attacker.Blocks[corev1.IPv4Protocol], 42).String()}
	})))
	refusedByRule(t, "cluster3's slice of kept/api", s.writeSlice(s.attackSlice(keptNamespace, "api", nthAddr(s.attacker.PodCIDR, 42).String())))
	after := s.ownersHold(t, "api")
	if fmt.Sprint(before) != fmt.Sprint(after) {
		t.Fatalf("kept/api went from %+v to %+v", before, after)
	}
	s.noRecordOfAttacker(t, "api")
	// Connections from cluster2 to kept/api's ClusterSetIP reach cluster1.
	vip := netip.MustParseAddr(after.IPs[0])
	for range 5 {
		var id echo.Identity
		err := wait.PollUntilContextTimeout(s.ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			var err error
			id, err = s.client.Ask(ctx, "tcp", netip.AddrPortFrom(vip, 80).String())
			return err == nil, nil
		})
		if err != nil || id.Cluster != s.victim.ID {
			t.Fatalf("a connection from cluster2 to kept/api (%s): answered by %q (%v), want %s", vip, id.Cluster, err, s.victim.ID)
		}
	}
	return "broker (admission: export rule kept)"
}
