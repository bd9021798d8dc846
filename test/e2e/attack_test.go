package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/miekg/dns"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/mcsd-io/mcsd/broker"
	"github.com/mcsd-io/mcsd/importer"
	"github.com/mcsd-io/mcsd/internal/record"
	"github.com/mcsd-io/mcsd/mcsslice"
	"github.com/mcsd-io/mcsd/test/lib/fixture"
	"github.com/mcsd-io/mcsd/test/lib/harness"
	"github.com/mcsd-io/mcsd/test/lib/hold"
	"github.com/mcsd-io/mcsd/vipalloc"
)

// attackSite is a clusterset of three members where the third is
// compromised: cluster1 (the victim) exports web.attack and runs mcsd,
// cluster2 (a bystander) runs mcsd and imports it, and cluster3 runs
// nothing of mcsd: whoever holds it writes to the broker directly with its
// real broker credentials, and tries to take what is cluster1's.
type attackSite struct {
	t        *testing.T
	ctx      context.Context
	cs       *harness.ClusterSet
	victim   *fixture.Member
	bystand  *fixture.Member
	attacker *fixture.Member
	daemons  []*fixture.Daemon
	client   *harness.Pod // in cluster2
	vip      netip.Addr   // web.attack's ClusterSetIP
	backend  *harness.Pod // web's pod in cluster1
}

const (
	attackNamespace = "attack"
	// ownedNamespace is cluster1's alone by an export rule.
	ownedNamespace = "owned"
	// attackCap is the importers' limit on one cluster's services here.
	attackCap = 16
	// attackHold is how long what must not happen is watched not happening.
	attackHold = 5 * time.Second
)

// attackBudget is each member's budget on the attack site's broker: few
// records, so that a flood reaches the quota.
var attackBudget = broker.Budget{ServiceImports: 24, EndpointSlices: 24}

func newAttackSite(t *testing.T) *attackSite {
	// Dual-stack clusters, so that cluster1 can export a dual-stack
	// service for cluster3 to try to narrow.
	cs := harness.Start(t, harness.Options{Clusters: 3, IPFamilies: harness.DualStack})
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	t.Cleanup(cancel)
	members := fixture.JoinWith(t, cs, broker.Settings{MemberBudget: attackBudget})
	s := &attackSite{t: t, ctx: ctx, cs: cs, victim: members[0], bystand: members[1], attacker: members[2]}
	for _, m := range members {
		createFaultNamespace(t, ctx, m.Cluster, attackNamespace)
		createFaultNamespace(t, ctx, m.Cluster, ownedNamespace)
	}
	for _, m := range []*fixture.Member{s.victim, s.bystand} {
		node, err := m.AddNode(ctx)
		if err != nil {
			t.Fatal(err)
		}
		s.daemons = append(s.daemons, fixture.StartDaemon(t, cs, m, node, fixture.DaemonOptions{
			Args: []string{fmt.Sprintf("--max-services-per-cluster=%d", attackCap)},
		}))
	}
	var err error
	if s.backend, err = s.daemons[0].Node.AddPod(ctx, harness.PodSpec{Namespace: attackNamespace, Name: "web", Labels: map[string]string{"app": "web"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.victim.Kube.CoreV1().Services(attackNamespace).Create(ctx, fixture.WebService(attackNamespace, "web", "web"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.victim.MCS.MulticlusterV1beta1().ServiceExports(attackNamespace).Create(ctx, &mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: attackNamespace, Name: "web"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if s.client, err = s.daemons[1].Node.AddPod(ctx, harness.PodSpec{Namespace: attackNamespace, Name: "client"}); err != nil {
		t.Fatal(err)
	}
	return s
}

// victimView is everything of cluster1's service that another cluster sees,
// and what cluster1 sees of its own export.
type victimView struct {
	Type      mcsv1beta1.ServiceImportType
	IPs       []string
	Ports     []mcsv1beta1.ServicePort
	Affinity  corev1.ServiceAffinity
	Endpoints map[string][]string // per importing cluster
	DNS       []string            // A answers from cluster2's mcsd
	Reached   map[string]int      // clusters that answered connections to the VIP
	Export    map[string]metav1.ConditionStatus
}

func (s *attackSite) view() (victimView, error) {
	v := victimView{Endpoints: map[string][]string{}, Export: map[string]metav1.ConditionStatus{}}
	si, err := s.bystand.MCS.MulticlusterV1beta1().ServiceImports(attackNamespace).Get(s.ctx, "web", metav1.GetOptions{})
	if err != nil {
		return v, err
	}
	v.Type, v.IPs, v.Ports, v.Affinity = si.Spec.Type, si.Spec.IPs, si.Spec.Ports, si.Spec.SessionAffinity
	for _, m := range []*fixture.Member{s.victim, s.bystand} {
		eps, err := importedAddresses(s.ctx, m.Cluster, attackNamespace, "web")
		if err != nil {
			return v, err
		}
		for src, addrs := range eps {
			slices.Sort(addrs)
			v.Endpoints[m.ID+"<-"+src] = addrs
		}
	}
	if v.DNS, err = s.resolveA("web." + attackNamespace + ".svc.clusterset.local"); err != nil {
		return v, err
	}
	v.Reached = map[string]int{}
	if vip, err := netip.ParseAddr(strings.Join(v.IPs, "")); err == nil {
		for range 5 {
			ctx, cancel := context.WithTimeout(s.ctx, 2*time.Second)
			id, err := s.client.Ask(ctx, "tcp", netip.AddrPortFrom(vip, 80).String())
			cancel()
			if err != nil {
				v.Reached["(failed)"]++
				continue
			}
			v.Reached[id.Cluster] = 1 // which clusters, not how often
		}
	}
	se, err := s.victim.MCS.MulticlusterV1beta1().ServiceExports(attackNamespace).Get(s.ctx, "web", metav1.GetOptions{})
	if err != nil {
		return v, err
	}
	for _, c := range []string{"Valid", "Ready"} {
		if cond := meta.FindStatusCondition(se.Status.Conditions, c); cond != nil {
			v.Export[c] = cond.Status
		}
	}
	return v, nil
}

// importedAddresses returns, per source cluster, the endpoint addresses of
// c's imported EndpointSlices of namespace/name.
func importedAddresses(ctx context.Context, c *harness.Cluster, namespace, name string) (map[string][]string, error) {
	list, err := c.Kube.DiscoveryV1().EndpointSlices(namespace).List(ctx, metav1.ListOptions{
		LabelSelector: mcsv1beta1.LabelServiceName + "=" + name + "," + discoveryv1.LabelManagedBy + "=" + mcsslice.Manager,
	})
	if err != nil {
		return nil, err
	}
	out := map[string][]string{}
	for _, es := range list.Items {
		src := es.Labels[mcsv1beta1.LabelSourceCluster]
		for _, ep := range es.Endpoints {
			out[src] = append(out[src], ep.Addresses...)
		}
	}
	return out, nil
}

func (s *attackSite) resolveA(name string) ([]string, error) {
	q := new(dns.Msg)
	q.SetQuestion(dns.Fqdn(name), dns.TypeA)
	var in *dns.Msg
	err := s.client.NS.Do(func() (err error) {
		in, _, err = (&dns.Client{Net: "udp", Timeout: 2 * time.Second}).Exchange(q, s.daemons[1].DNS.String())
		return err
	})
	if err != nil {
		return nil, err
	}
	var out []string
	for _, rr := range in.Answer {
		if a, ok := rr.(*dns.A); ok {
			out = append(out, a.A.String())
		}
	}
	slices.Sort(out)
	return out, nil
}

// refusedByBroker says whether err is the broker's refusal of a write.
func refusedByBroker(err error) bool {
	return apierrors.IsForbidden(err) || apierrors.IsInvalid(err)
}

// mustRefuse fails t unless err is the broker's refusal of what.
func mustRefuse(t *testing.T, what string, err error) {
	t.Helper()
	if !refusedByBroker(err) {
		t.Fatalf("%s: the broker did not refuse it: %v", what, err)
	}
	t.Logf("%s: refused: %v", what, err)
}

// siteAttack is an attack that another file adds to
// TestACompromisedMemberTakesNothing, run on the same site, after the
// attacks of this file but before the flood, which fills cluster3's quota.
type siteAttack struct {
	name string
	try  func(t *testing.T, s *attackSite) string
}

// siteAttacks are the attacks of other files, added from their init.
var siteAttacks []siteAttack

// attackRecord is a record of cluster3 for namespace/name, as cluster3's
// exporter would write it, changed by mutate.
func (s *attackSite) attackRecord(namespace, name string, mutate func(*record.Export)) *mcsv1beta1.ServiceImport {
	e := record.Export{
		Cluster: s.attacker.ID, Namespace: namespace, Name: name, Created: metav1.Now(),
		Type:       mcsv1beta1.ClusterSetIP,
		Ports:      []mcsv1beta1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}},
		IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol},
	}
	if mutate != nil {
		mutate(&e)
	}
	si := record.Encode(e)
	si.Namespace = s.attacker.BrokerNamespace()
	return si
}

func (s *attackSite) writeRecord(si *mcsv1beta1.ServiceImport) error {
	_, err := s.attacker.BrokerMCS.MulticlusterV1beta1().ServiceImports(s.attacker.BrokerNamespace()).Create(s.ctx, si, metav1.CreateOptions{})
	return err
}

// attackSlice is a broker EndpointSlice named and labelled as cluster3's
// slice of namespace/name, with one ready endpoint per address.
func (s *attackSite) attackSlice(namespace, name string, addrs ...string) *discoveryv1.EndpointSlice {
	es := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: s.attacker.BrokerNamespace(),
			Name:      record.EndpointSliceName(s.attacker.ID, namespace, name, discoveryv1.AddressTypeIPv4, 0),
			Labels:    record.EndpointSliceLabels(s.attacker.ID, namespace, name),
		},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To[int32](fixture.EchoPort)}},
	}
	for _, a := range addrs {
		es.Endpoints = append(es.Endpoints, discoveryv1.Endpoint{Addresses: []string{a}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}})
	}
	return es
}

func (s *attackSite) writeSlice(es *discoveryv1.EndpointSlice) error {
	_, err := s.attacker.BrokerKube.DiscoveryV1().EndpointSlices(s.attacker.BrokerNamespace()).Create(s.ctx, es, metav1.CreateOptions{})
	return err
}

// export has cluster1 export namespace/name, a ClusterIP Service of the web
// pods, changed by mutate.
func (s *attackSite) export(namespace, name string, mutate func(*corev1.Service)) {
	s.t.Helper()
	svc := fixture.WebService(namespace, name, "web")
	if mutate != nil {
		mutate(svc)
	}
	if _, err := s.victim.Kube.CoreV1().Services(namespace).Create(s.ctx, svc, metav1.CreateOptions{}); err != nil {
		s.t.Fatal(err)
	}
	if _, err := s.victim.MCS.MulticlusterV1beta1().ServiceExports(namespace).Create(s.ctx, &mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}, metav1.CreateOptions{}); err != nil {
		s.t.Fatal(err)
	}
}

// importOf waits until cluster c holds a ServiceImport namespace/name for
// which ok says yes, and returns it.
func importOf(ctx context.Context, c *harness.Cluster, namespace, name string, ok func(*mcsv1beta1.ServiceImport) bool) (*mcsv1beta1.ServiceImport, error) {
	var si *mcsv1beta1.ServiceImport
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		var err error
		si, err = c.MCS.MulticlusterV1beta1().ServiceImports(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		return ok(si), nil
	})
	if err != nil {
		return si, fmt.Errorf("ServiceImport %s/%s in %s: %w (last: %+v)", namespace, name, c.Name, err, si)
	}
	return si, nil
}

// eventOn waits for an Event whose reason is reason and whose message
// contains text, in namespace of cluster c.
func eventOn(ctx context.Context, c *harness.Cluster, namespace, reason, text string) error {
	var seen []string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := c.Kube.CoreV1().Events(namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		seen = seen[:0]
		for _, e := range list.Items {
			seen = append(seen, e.Reason+": "+e.Message)
			if e.Reason == reason && strings.Contains(e.Message, text) {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("no Event %s mentioning %q in %s/%s; events: %v", reason, text, c.Name, namespace, seen)
	}
	return nil
}

type attackRow struct{ attack, refusedBy, unaffected string }

// TestACompromisedMemberTakesNothing has cluster3, holding its own real
// broker credentials, try every way we know to take, forge or starve what
// is cluster1's; each attempt must be refused by the broker or ignored by
// every importer and proxier, visibly, with cluster1's service exactly as
// it was: spec, ClusterSetIP, endpoints in both importing clusters, DNS
// answer and data plane.
func TestACompromisedMemberTakesNothing(t *testing.T) {
	s := newAttackSite(t)
	ctx := s.ctx
	var before victimView
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		var err error
		before, err = s.view()
		return err == nil && len(before.IPs) == 1 && len(before.DNS) == 1 && before.Reached[s.victim.ID] == 1 &&
			len(before.Endpoints[s.bystand.ID+"<-"+s.victim.ID]) == 1 && before.Export["Ready"] == metav1.ConditionTrue, nil
	})
	if err != nil {
		t.Fatalf("cluster1's web.attack never became reachable from cluster2: %+v", before)
	}
	s.vip = netip.MustParseAddr(before.IPs[0])
	t.Logf("cluster1's web.attack: ClusterSetIP %s, endpoints %v, DNS %v", s.vip, before.Endpoints, before.DNS)

	// The attacker is a live member: its Lease renews throughout, so no
	// attack is ignored merely because cluster3 looks dead.
	attacker := fixture.FakeExporter{Cluster: s.attacker.ID, Kube: s.attacker.BrokerKube, MCS: s.attacker.BrokerMCS}
	renewCtx, stopRenew := context.WithCancel(ctx)
	defer stopRenew()
	if err := attacker.Renew(ctx); err != nil {
		t.Fatal(err)
	}
	go func() {
		for renewCtx.Err() == nil {
			_ = attacker.Renew(renewCtx)
			select {
			case <-renewCtx.Done():
			case <-time.After(time.Second):
			}
		}
	}()

	victimPrefix := attackNamespace + ".web." + s.victim.ID
	attackerBlock := s.attacker.Blocks[corev1.IPv4Protocol]
	attackerVIP := func(i int) string { return nthAddr(attackerBlock, 10+i).String() }
	var rows []attackRow
	unaffected := func(t *testing.T) string {
		t.Helper()
		var now victimView
		err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
			var err error
			now, err = s.view()
			return err == nil && viewEqual(before, now), nil
		})
		if err != nil {
			t.Errorf("cluster1's service changed:\nbefore %+v\nnow    %+v", before, now)
			return "NO"
		}
		return "yes"
	}
	run := func(attack string, try func(t *testing.T) string) {
		t.Run(attack, func(t *testing.T) {
			by := try(t)
			rows = append(rows, attackRow{attack, by, unaffected(t)})
		})
	}
	run("write a record with ClusterSetIP 169.254.169.254 (cloud metadata)", func(t *testing.T) string {
		mustRefuse(t, "record", s.writeRecord(s.attackRecord(attackNamespace, "metadata", func(e *record.Export) { e.VIPs = []string{"169.254.169.254"} })))
		return "broker (admission: VIP outside the clusterset CIDRs)"
	})
	run("write a record with the kubernetes Service's ClusterIP as VIP", func(t *testing.T) string {
		kubernetesIP := nthAddr(s.victim.ServiceCIDR, 1).String()
		mustRefuse(t, "record", s.writeRecord(s.attackRecord(attackNamespace, "apiserver", func(e *record.Export) { e.VIPs = []string{kubernetesIP} })))
		return "broker (admission: VIP outside the clusterset CIDRs)"
	})
	run("publish cluster1's ClusterSetIP as the VIP of another service", func(t *testing.T) string {
		if err := s.writeRecord(s.attackRecord(attackNamespace, "steal", func(e *record.Export) { e.VIPs = []string{s.vip.String()} })); err != nil {
			if refusedByBroker(err) {
				return "broker (admission)"
			}
			t.Fatal(err)
		}
		for _, m := range []*fixture.Member{s.victim, s.bystand} {
			if _, err := importOf(ctx, m.Cluster, attackNamespace, "steal", func(*mcsv1beta1.ServiceImport) bool { return true }); err != nil {
				t.Fatal(err)
			}
			if err := hold.For(ctx, attackHold, 200*time.Millisecond, func(ctx context.Context) error {
				si, err := m.MCS.MulticlusterV1beta1().ServiceImports(attackNamespace).Get(ctx, "steal", metav1.GetOptions{})
				if err != nil {
					return err
				}
				if slices.Contains(si.Spec.IPs, s.vip.String()) {
					return fmt.Errorf("%s's import of steal.attack took %s: %v", m.ID, s.vip, si.Spec.IPs)
				}
				return nil
			}); err != nil {
				t.Error(err)
			}
			if err := eventOn(ctx, m.Cluster, attackNamespace, importer.ReasonClusterSetIPNotOwned, s.vip.String()); err != nil {
				t.Error(err)
			}
		}
		return "importers (an address cluster1 owns and gives another service)"
	})
	run("publish a VIP in nobody's block of the clusterset range", func(t *testing.T) string {
		stray := "243.254.0.7"
		if err := s.writeRecord(s.attackRecord(attackNamespace, "stray", func(e *record.Export) { e.VIPs = []string{stray} })); err != nil {
			if refusedByBroker(err) {
				return "broker (admission)"
			}
			t.Fatal(err)
		}
		si, err := importOf(ctx, s.bystand.Cluster, attackNamespace, "stray", func(*mcsv1beta1.ServiceImport) bool { return true })
		if err != nil {
			t.Fatal(err)
		}
		if len(si.Spec.IPs) != 0 {
			t.Fatalf("cluster2 imported stray.attack with VIPs %v", si.Spec.IPs)
		}
		if err := eventOn(ctx, s.bystand.Cluster, attackNamespace, importer.ReasonClusterSetIPNotOwned, stray); err != nil {
			t.Error(err)
		}
		if err := metricReaches(ctx, s.daemons[1], "mcsd_importer_rejected_clustersetips_total", `reason="ClusterSetIPNotOwned"`, 2); err != nil {
			t.Error(err)
		}
		return "importers (an address in no claimed block)"
	})
	run("export web.attack too, claiming an export from 1970, ClientIP affinity and its own VIP", func(t *testing.T) string {
		// The oldest export decides affinity and the VIP; ports would be
		// merged from every exporter, as the API asks, so they are not
		// what precedence decides.
		forged := s.attackRecord(attackNamespace, "web", func(e *record.Export) {
			e.Created = metav1.NewTime(time.Date(1970, 1, 1, 0, 0, 0, 0, time.UTC))
			e.SessionAffinity = corev1.ServiceAffinityClientIP
			e.VIPs = []string{attackerVIP(0)}
		})
		if err := s.writeRecord(forged); err != nil {
			t.Fatal(err)
		}
		// cluster3 now contributes to web.attack: wait until cluster2 has
		// merged its record, then cluster1's spec and VIP must still rule.
		if _, err := importOf(ctx, s.bystand.Cluster, attackNamespace, "web", func(si *mcsv1beta1.ServiceImport) bool {
			return slices.ContainsFunc(si.Status.Clusters, func(c mcsv1beta1.ClusterStatus) bool { return c.Cluster == s.attacker.ID })
		}); err != nil {
			t.Fatal(err)
		}
		return "importers (precedence bounded by the broker's creationTimestamp)"
	})
	run("write records, slices and the claim in cluster1's names", func(t *testing.T) string {
		mustRefuse(t, "record in cluster1's name", s.writeRecord(func() *mcsv1beta1.ServiceImport {
			si := s.attackRecord(attackNamespace, "later", nil)
			si.Name = record.Name(s.victim.ID, attackNamespace, "later")
			return si
		}()))
		slice := s.attackSlice(attackNamespace, "web", nthAddr(s.attacker.PodCIDR, 5).String())
		slice.Name = victimPrefix + ".ipv4-7"
		mustRefuse(t, "slice in cluster1's name", s.writeSlice(slice))
		claim := &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: vipalloc.ClaimName(s.victim.ID, corev1.IPv6Protocol), Namespace: broker.DefaultNamespace,
				Labels: map[string]string{vipalloc.LabelClaim: "", mcsv1beta1.LabelSourceCluster: s.attacker.ID}},
			Data: map[string]string{vipalloc.ClaimKey: "fd7a:6d63:7364:ff::/64"},
		}
		_, err := s.attacker.BrokerKube.CoreV1().ConfigMaps(broker.DefaultNamespace).Create(ctx, claim, metav1.CreateOptions{})
		if !refusedByBroker(err) && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("claim in cluster1's name: %v", err)
		}
		return "broker (admission: the writer's ID is part of every name)"
	})
	run("take over cluster1's heartbeat Lease", func(t *testing.T) string {
		leases := s.attacker.BrokerKube.CoordinationV1().Leases(s.victim.BrokerNamespace())
		l, err := leases.Get(ctx, record.LeaseName(s.victim.ID), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		l.Labels[mcsv1beta1.LabelSourceCluster] = s.attacker.ID
		_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
		mustRefuse(t, "relabel cluster1's Lease", err)
		mustRefuse(t, "delete cluster1's Lease", leases.Delete(ctx, l.Name, metav1.DeleteOptions{}))
		squat := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: record.LeaseName("cluster9"), Labels: record.LeaseLabels(s.attacker.ID)}}
		_, err = s.attacker.BrokerKube.CoordinationV1().Leases(s.attacker.BrokerNamespace()).Create(ctx, squat, metav1.CreateOptions{})
		mustRefuse(t, "create another cluster's Lease name", err)
		return "broker (RBAC: cluster1's namespace; admission: names)"
	})
	run("delete cluster1's record, slices and claim", func(t *testing.T) string {
		mustRefuse(t, "record", s.attacker.BrokerMCS.MulticlusterV1beta1().ServiceImports(s.victim.BrokerNamespace()).Delete(ctx, record.Name(s.victim.ID, attackNamespace, "web"), metav1.DeleteOptions{}))
		mustRefuse(t, "slice", s.attacker.BrokerKube.DiscoveryV1().EndpointSlices(s.victim.BrokerNamespace()).Delete(ctx, record.EndpointSliceName(s.victim.ID, attackNamespace, "web", discoveryv1.AddressTypeIPv4, 0), metav1.DeleteOptions{}))
		mustRefuse(t, "claim", s.attacker.BrokerKube.CoreV1().ConfigMaps(broker.DefaultNamespace).Delete(ctx, vipalloc.ClaimName(s.victim.ID, corev1.IPv4Protocol), metav1.DeleteOptions{}))
		return "broker (RBAC: cluster1's namespace; admission: labels of the old claim)"
	})
	run("write its records into cluster1's namespace or the broker namespace", func(t *testing.T) string {
		for _, namespace := range []string{s.victim.BrokerNamespace(), broker.DefaultNamespace} {
			si := s.attackRecord(attackNamespace, "elsewhere", nil)
			si.Namespace = namespace
			_, err := s.attacker.BrokerMCS.MulticlusterV1beta1().ServiceImports(namespace).Create(ctx, si, metav1.CreateOptions{})
			mustRefuse(t, "record in "+namespace, err)
			l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: record.LeaseName(s.attacker.ID), Labels: record.LeaseLabels(s.attacker.ID)}}
			_, err = s.attacker.BrokerKube.CoordinationV1().Leases(namespace).Create(ctx, l, metav1.CreateOptions{})
			mustRefuse(t, "Lease in "+namespace, err)
		}
		return "broker (RBAC: a member writes in its own namespace only)"
	})
	run("claim the whole clusterset range, or a second block", func(t *testing.T) string {
		cms := s.attacker.BrokerKube.CoreV1().ConfigMaps(broker.DefaultNamespace)
		whole := &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: vipalloc.ClaimName(s.attacker.ID, corev1.IPv4Protocol), Namespace: broker.DefaultNamespace,
				Labels: map[string]string{vipalloc.LabelClaim: "", mcsv1beta1.LabelSourceCluster: s.attacker.ID}},
			Data: map[string]string{vipalloc.ClaimKey: vipalloc.DefaultClusterSetCIDRv4.String()},
		}
		second := whole.DeepCopy()
		second.Name = "clustersetip-" + s.attacker.ID + "-ipv4-2"
		second.Data[vipalloc.ClaimKey] = "243.250.0.0/16"
		_, err := cms.Create(ctx, second, metav1.CreateOptions{})
		mustRefuse(t, "a second claim", err)
		// Its own claim withdrawn (which it may do), the whole range in
		// its place.
		own := whole.DeepCopy()
		own.Data[vipalloc.ClaimKey] = attackerBlock.String()
		if err := cms.Delete(ctx, own.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		_, err = cms.Create(ctx, whole, metav1.CreateOptions{})
		mustRefuse(t, "claim the whole range", err)
		if _, err := cms.Create(ctx, own, metav1.CreateOptions{}); err != nil {
			t.Fatalf("claiming its block again: %v", err)
		}
		return "broker (admission: one claim per family, of the configured size)"
	})
	run("inject endpoints outside its pod CIDRs (cluster1's pod, the kubernetes ClusterIP, an outside host)", func(t *testing.T) string {
		own := nthAddr(s.attacker.PodCIDR, 9).String()
		// Addresses the API server's own EndpointSlice validation lets
		// through (it refuses loopback and link-local ones itself).
		foreign := []string{s.backend.IP.String(), nthAddr(s.victim.ServiceCIDR, 1).String(), "192.0.2.10"}
		if err := s.writeRecord(s.attackRecord(attackNamespace, "inject", func(e *record.Export) { e.VIPs = []string{attackerVIP(1)} })); err != nil {
			t.Fatal(err)
		}
		err := s.writeSlice(s.attackSlice(attackNamespace, "inject", append([]string{own}, foreign...)...))
		if refusedByBroker(err) {
			if !strings.Contains(err.Error(), broker.EndpointsPolicy) {
				t.Fatalf("refused, but not by %s: %v", broker.EndpointsPolicy, err)
			}
			t.Logf("refused: %v", err)
			return "broker (admission: endpoints outside the writer's declared pod CIDRs)"
		}
		if err != nil {
			t.Fatal(err)
		}
		var got map[string][]string
		err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
			got, _ = importedAddresses(ctx, s.bystand.Cluster, attackNamespace, "inject")
			return len(got[s.attacker.ID]) > 0, nil
		})
		if err != nil || !slices.Equal(got[s.attacker.ID], []string{own}) {
			t.Fatalf("cluster2 imported %v of cluster3's inject.attack, want only %s", got, own)
		}
		return "importers (endpoints outside the writer's declared pod CIDRs)"
	})
	run("name cluster2's node as the node of its endpoint", func(t *testing.T) string {
		own := nthAddr(s.attacker.PodCIDR, 10).String()
		if err := s.writeRecord(s.attackRecord(attackNamespace, "local", func(e *record.Export) { e.VIPs = []string{attackerVIP(2)} })); err != nil {
			t.Fatal(err)
		}
		es := s.attackSlice(attackNamespace, "local", own)
		es.Endpoints[0].NodeName = ptr.To(s.daemons[1].Node.Name)
		es.Endpoints[0].TargetRef = &corev1.ObjectReference{Kind: "Pod", Namespace: attackNamespace, Name: "client"}
		if err := s.writeSlice(es); err != nil {
			if refusedByBroker(err) {
				t.Logf("refused: %v", err)
				return "broker (admission: endpoints name no node, zone or target)"
			}
			t.Fatal(err)
		}
		var list *discoveryv1.EndpointSliceList
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			var err error
			list, err = s.bystand.Kube.DiscoveryV1().EndpointSlices(attackNamespace).List(ctx, metav1.ListOptions{LabelSelector: mcsv1beta1.LabelServiceName + "=local"})
			return err == nil && len(list.Items) > 0 && len(list.Items[0].Endpoints) > 0, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		for _, ep := range list.Items[0].Endpoints {
			if ep.NodeName != nil || ep.TargetRef != nil {
				t.Fatalf("cluster2 kept nodeName %v / targetRef %v of a remote endpoint", ptr.Deref(ep.NodeName, ""), ep.TargetRef)
			}
		}
		return "importers (nodeName and targetRef stripped)"
	})
	run("export a kube-system service", func(t *testing.T) string {
		if err := s.writeRecord(s.attackRecord("kube-system", "kube-dns", func(e *record.Export) { e.VIPs = []string{attackerVIP(3)} })); err != nil {
			if refusedByBroker(err) {
				return "broker (admission)"
			}
			t.Fatal(err)
		}
		// A service exported in the same breath in an allowed namespace
		// shows the importer has read the records.
		if err := s.writeRecord(s.attackRecord(attackNamespace, "marker", func(e *record.Export) { e.VIPs = []string{attackerVIP(4)} })); err != nil {
			t.Fatal(err)
		}
		for _, m := range []*fixture.Member{s.victim, s.bystand} {
			if _, err := importOf(ctx, m.Cluster, attackNamespace, "marker", func(*mcsv1beta1.ServiceImport) bool { return true }); err != nil {
				t.Fatal(err)
			}
			if err := hold.For(ctx, attackHold, 200*time.Millisecond, func(ctx context.Context) error {
				_, err := m.MCS.MulticlusterV1beta1().ServiceImports("kube-system").Get(ctx, "kube-dns", metav1.GetOptions{})
				if err == nil {
					return fmt.Errorf("%s imported kube-system/kube-dns", m.ID)
				}
				if !apierrors.IsNotFound(err) {
					return err
				}
				return nil
			}); err != nil {
				t.Error(err)
			}
		}
		for _, d := range s.daemons {
			if err := metricReaches(ctx, d, "mcsd_importer_ignored_records_total", `reason="NamespaceDenied"`, 1); err != nil {
				t.Error(err)
			}
		}
		return "importers (namespace denylist: kube-system)"
	})
	run("keep a deleted record alive with a finalizer, or hang it off cluster1's record", func(t *testing.T) string {
		held := s.attackRecord(attackNamespace, "held", func(e *record.Export) { e.VIPs = []string{attackerVIP(5)} })
		held.Finalizers = []string{"example.com/keep"}
		mustRefuse(t, "a record with a finalizer", s.writeRecord(held))
		victims, err := s.attacker.BrokerMCS.MulticlusterV1beta1().ServiceImports(s.victim.BrokerNamespace()).Get(ctx, record.Name(s.victim.ID, attackNamespace, "web"), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		owned := s.attackRecord(attackNamespace, "owned", nil)
		owned.OwnerReferences = []metav1.OwnerReference{{APIVersion: mcsv1beta1.GroupVersion.String(), Kind: "ServiceImport", Name: victims.Name, UID: victims.UID, BlockOwnerDeletion: ptr.To(true)}}
		mustRefuse(t, "a record owned by cluster1's", s.writeRecord(owned))
		// Its own record, which it may write, then a finalizer on it.
		records := s.attacker.BrokerMCS.MulticlusterV1beta1().ServiceImports(s.attacker.BrokerNamespace())
		mine, err := records.Get(ctx, record.Name(s.attacker.ID, attackNamespace, "marker"), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		mine.Finalizers = []string{"example.com/keep"}
		_, err = records.Update(ctx, mine, metav1.UpdateOptions{})
		mustRefuse(t, "a finalizer on its own record", err)
		return "broker (admission: no finalizers or owner references)"
	})
	run("store 250 kB of exported annotations, a slice of 1000 endpoints of 1 kB, 90 kB of managedFields", func(t *testing.T) string {
		fat := s.attackRecord(attackNamespace, "fat", func(e *record.Export) {
			e.ExportedAnnotations = map[string]string{"example.com/blob": strings.Repeat("x", 250<<10)}
		})
		mustRefuse(t, "a record of 250 kB", s.writeRecord(fat))
		wide := s.attackSlice(attackNamespace, "marker")
		for i := range 1000 {
			wide.Endpoints = append(wide.Endpoints, discoveryv1.Endpoint{
				Addresses:  []string{nthAddr(s.attacker.PodCIDR, 100+i).String()},
				Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)},
				Hostname:   ptr.To(fmt.Sprintf("h%d-%s", i, strings.Repeat("x", 50))),
				NodeName:   ptr.To(strings.Repeat("n", 253)),
				Zone:       ptr.To(strings.Repeat("z", 600)),
			})
		}
		mustRefuse(t, "a slice of about 1 MB", s.writeSlice(wide))
		records := s.attacker.BrokerMCS.MulticlusterV1beta1().ServiceImports(s.attacker.BrokerNamespace())
		mine, err := records.Get(ctx, record.Name(s.attacker.ID, attackNamespace, "marker"), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		bogus := map[string]any{}
		for i := range 1500 {
			bogus[fmt.Sprintf("f:bogus-%04d-%s", i, strings.Repeat("y", 40))] = map[string]any{}
		}
		raw, err := json.Marshal(map[string]any{"f:metadata": map[string]any{"f:labels": bogus}})
		if err != nil {
			t.Fatal(err)
		}
		mine.ManagedFields = append(mine.ManagedFields, metav1.ManagedFieldsEntry{
			Manager: "stuffing", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: mcsv1beta1.GroupVersion.String(),
			FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: raw},
		})
		_, err = records.Update(ctx, mine, metav1.UpdateOptions{})
		mustRefuse(t, fmt.Sprintf("%d kB of managedFields", len(raw)>>10), err)
		return "broker (admission: byte budgets)"
	})
	run("export default/kubernetes, and services of kube-public and mcsd-system", func(t *testing.T) string {
		for i, target := range []struct{ namespace, name string }{{"default", "kubernetes"}, {"kube-public", "pub"}, {"mcsd-system", "mcsd-dns"}} {
			if err := s.writeRecord(s.attackRecord(target.namespace, target.name, func(e *record.Export) { e.VIPs = []string{attackerVIP(20 + i)} })); err != nil {
				if refusedByBroker(err) {
					t.Fatalf("%s/%s: refused by the broker, not by the importers: %v", target.namespace, target.name, err)
				}
				t.Fatal(err)
			}
		}
		// A service exported in the same breath shows the importers read.
		if err := s.writeRecord(s.attackRecord(attackNamespace, "marker2", func(e *record.Export) { e.VIPs = []string{attackerVIP(7)} })); err != nil {
			t.Fatal(err)
		}
		for _, m := range []*fixture.Member{s.victim, s.bystand} {
			if _, err := importOf(ctx, m.Cluster, attackNamespace, "marker2", func(*mcsv1beta1.ServiceImport) bool { return true }); err != nil {
				t.Fatal(err)
			}
			if err := hold.For(ctx, attackHold, 200*time.Millisecond, func(ctx context.Context) error {
				for _, ns := range []string{"default", "kube-public", "mcsd-system"} {
					list, err := m.MCS.MulticlusterV1beta1().ServiceImports(ns).List(ctx, metav1.ListOptions{})
					if err != nil {
						return err
					}
					if len(list.Items) > 0 {
						return fmt.Errorf("%s imported %s/%s", m.ID, ns, list.Items[0].Name)
					}
				}
				return nil
			}); err != nil {
				t.Error(err)
			}
		}
		// What kubernetes.default.svc.clusterset.local answers: nothing.
		if addrs, err := s.resolveA("kubernetes.default.svc.clusterset.local"); err != nil || len(addrs) != 0 {
			t.Errorf("kubernetes.default.svc.clusterset.local answers %v (%v)", addrs, err)
		}
		return "importers (denylist: default/kubernetes, kube-public, mcsd's own namespace)"
	})
	run("narrow cluster1's dual-stack service to IPv6 by exporting it IPv6-only", func(t *testing.T) string {
		s.export(attackNamespace, "dual", func(svc *corev1.Service) {
			svc.Spec.IPFamilyPolicy = ptr.To(corev1.IPFamilyPolicyRequireDualStack)
		})
		dual, err := importOf(ctx, s.bystand.Cluster, attackNamespace, "dual", func(si *mcsv1beta1.ServiceImport) bool {
			return len(si.Spec.IPs) == 2 && len(si.Spec.IPFamilies) == 2
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.writeRecord(s.attackRecord(attackNamespace, "dual", func(e *record.Export) {
			e.IPFamilies = []corev1.IPFamily{corev1.IPv6Protocol}
			e.VIPs = []string{nthAddr(s.attacker.Blocks[corev1.IPv6Protocol], 10).String()}
		})); err != nil {
			t.Fatal(err)
		}
		if _, err := importOf(ctx, s.bystand.Cluster, attackNamespace, "dual", func(si *mcsv1beta1.ServiceImport) bool {
			return slices.ContainsFunc(si.Status.Clusters, func(c mcsv1beta1.ClusterStatus) bool { return c.Cluster == s.attacker.ID })
		}); err != nil {
			t.Fatal(err)
		}
		if err := hold.For(ctx, attackHold, 200*time.Millisecond, func(ctx context.Context) error {
			si, err := s.bystand.MCS.MulticlusterV1beta1().ServiceImports(attackNamespace).Get(ctx, "dual", metav1.GetOptions{})
			if err != nil {
				return err
			}
			if !slices.Equal(si.Spec.IPFamilies, dual.Spec.IPFamilies) || !slices.Equal(si.Spec.IPs, dual.Spec.IPs) {
				return fmt.Errorf("cluster2's import of dual.attack went from %v %v to %v %v", dual.Spec.IPFamilies, dual.Spec.IPs, si.Spec.IPFamilies, si.Spec.IPs)
			}
			return nil
		}); err != nil {
			t.Error(err)
		}
		return "importers (the oldest export's IP families; cluster3 gets IPFamilyConflict)"
	})
	run("be declared again with cluster1's pod CIDR", func(t *testing.T) string {
		_, err := broker.AddMember(ctx, s.cs.Broker.Kube, broker.DefaultNamespace, s.attacker.ID, broker.MemberOptions{PodCIDRs: []netip.Prefix{s.victim.PodCIDR}})
		if err == nil || !strings.Contains(err.Error(), "of member "+s.victim.ID) {
			t.Fatalf("declaring cluster3 with cluster1's pod CIDR %s: %v", s.victim.PodCIDR, err)
		}
		t.Logf("refused: %v", err)
		return "broker (AddMember: pod CIDRs overlapping another member's)"
	})
	run("export a namespace an export rule gives cluster1: first, alongside, as Headless, or from before the rule", func(t *testing.T) string {
		// Written while no rule covers the namespace.
		if err := s.writeRecord(s.attackRecord(ownedNamespace, "old", func(e *record.Export) { e.VIPs = []string{attackerVIP(8)} })); err != nil {
			t.Fatal(err)
		}
		if _, err := importOf(ctx, s.bystand.Cluster, ownedNamespace, "old", func(*mcsv1beta1.ServiceImport) bool { return true }); err != nil {
			t.Fatal(err)
		}
		rule := broker.ExportRule{Name: ownedNamespace, Namespaces: []string{ownedNamespace}, Members: []string{s.victim.ID}}
		if err := broker.SetExportRule(ctx, s.cs.Broker.Config, broker.DefaultNamespace, rule); err != nil {
			t.Fatal(err)
		}
		// Before the owner exports: it would decide type, ports and VIP.
		mustRefuse(t, "exporting owned/api first", s.writeRecord(s.attackRecord(ownedNamespace, "api", func(e *record.Export) {
			e.SessionAffinity = corev1.ServiceAffinityClientIP
			e.VIPs = []string{attackerVIP(9)}
		})))
		s.export(ownedNamespace, "api", nil)
		api, err := importOf(ctx, s.bystand.Cluster, ownedNamespace, "api", func(si *mcsv1beta1.ServiceImport) bool { return len(si.Spec.IPs) == 1 })
		if err != nil {
			t.Fatal(err)
		}
		mustRefuse(t, "joining owned/api with endpoints", s.writeSlice(s.attackSlice(ownedNamespace, "api", nthAddr(s.attacker.PodCIDR, 11).String())))
		mustRefuse(t, "exporting owned/api as Headless", s.writeRecord(s.attackRecord(ownedNamespace, "api", func(e *record.Export) { e.Type = mcsv1beta1.Headless })))
		// The record from before the rule goes from every import.
		for _, m := range []*fixture.Member{s.victim, s.bystand} {
			err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
				_, err := m.MCS.MulticlusterV1beta1().ServiceImports(ownedNamespace).Get(ctx, "old", metav1.GetOptions{})
				return apierrors.IsNotFound(err), nil
			})
			if err != nil {
				t.Errorf("%s still imports owned/old, which only cluster3 exported before the rule", m.ID)
			}
		}
		if err := metricReaches(ctx, s.daemons[1], "mcsd_importer_ignored_records_total", `reason="ExportNotAllowed"`, 1); err != nil {
			t.Error(err)
		}
		if si, err := s.bystand.MCS.MulticlusterV1beta1().ServiceImports(ownedNamespace).Get(ctx, "api", metav1.GetOptions{}); err != nil ||
			len(si.Status.Clusters) != 1 || si.Status.Clusters[0].Cluster != s.victim.ID || !slices.Equal(si.Spec.IPs, api.Spec.IPs) || si.Spec.SessionAffinity == corev1.ServiceAffinityClientIP {
			t.Errorf("cluster2's owned/api: %+v (%v)", si, err)
		}
		return "broker (admission: export rules); importers (records from before the rule)"
	})
	for _, a := range siteAttacks {
		run(a.name, func(t *testing.T) string { return a.try(t, s) })
	}
	run(fmt.Sprintf("flood the broker with records (quota %d, importers' cap %d)", attackBudget.ServiceImports, attackCap), func(t *testing.T) string {
		const flood = 3 * attackCap
		var stopped error
		for i := range flood {
			if err := s.writeRecord(s.attackRecord(attackNamespace, fmt.Sprintf("flood-%02d", i), nil)); err != nil {
				if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "exceeded quota: "+broker.MemberQuotaName) {
					t.Fatalf("record %d: %v, want cluster3's quota's refusal", i, err)
				}
				t.Logf("cluster3's quota stopped the flood at record %d: %v", i, err)
				stopped = err
				break
			}
		}
		if stopped == nil {
			t.Fatalf("cluster3 wrote %d records, past its budget of %d", flood, attackBudget.ServiceImports)
		}
		if err := eventOn(ctx, s.bystand.Cluster, "mcsd-system", importer.EventClusterOverServiceCap, s.attacker.ID); err != nil {
			t.Error(err)
		}
		if err := metricReaches(ctx, s.daemons[1], "mcsd_importer_ignored_records_total", `reason="OverServiceCap"`, 1); err != nil {
			t.Error(err)
		}
		// cluster1 still exports: its quota is its own.
		s.export(attackNamespace, "after-flood", nil)
		if _, err := importOf(ctx, s.bystand.Cluster, attackNamespace, "after-flood", func(si *mcsv1beta1.ServiceImport) bool {
			return len(si.Spec.IPs) == 1 && len(si.Status.Clusters) == 1 && si.Status.Clusters[0].Cluster == s.victim.ID
		}); err != nil {
			t.Errorf("cluster1's export after cluster3's flood: %v", err)
		}
		if err := hold.For(ctx, attackHold, 200*time.Millisecond, func(ctx context.Context) error {
			list, err := s.bystand.MCS.MulticlusterV1beta1().ServiceImports(attackNamespace).List(ctx, metav1.ListOptions{})
			if err != nil {
				return err
			}
			var fromAttacker int
			for _, si := range list.Items {
				if slices.ContainsFunc(si.Status.Clusters, func(c mcsv1beta1.ClusterStatus) bool { return c.Cluster == s.attacker.ID }) {
					fromAttacker++
				}
			}
			if fromAttacker > attackCap {
				return fmt.Errorf("cluster2 imports %d services of cluster3, over the cap of %d", fromAttacker, attackCap)
			}
			return nil
		}); err != nil {
			t.Error(err)
		}
		return "broker (cluster3's own ResourceQuota); importers (per-cluster cap)"
	})

	var b strings.Builder
	w := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "attack\trefused by\tvictim unaffected")
	for _, r := range rows {
		fmt.Fprintf(w, "%s\t%s\t%s\n", r.attack, r.refusedBy, r.unaffected)
	}
	_ = w.Flush()
	t.Logf("what cluster3, compromised, tried against cluster1:\n%s", b.String())
}

func viewEqual(a, b victimView) bool {
	return fmt.Sprint(a) == fmt.Sprint(b)
}

// nthAddr is the i-th address of p.
func nthAddr(p netip.Prefix, i int) netip.Addr {
	a := p.Masked().Addr()
	for range i {
		a = a.Next()
	}
	return a
}
