package importer

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/klog/v2"

	"github.com/mcsd-io/mcsd/broker"
	"github.com/mcsd-io/mcsd/internal/cacheobj"
	"github.com/mcsd-io/mcsd/internal/record"
	"github.com/mcsd-io/mcsd/vipalloc"
)

// Members trust the broker's API server, not each other. The broker's
// admission policy checks what each member writes; the importer checks
// again what it can, so that one compromised member holding valid broker
// credentials cannot take another member's addresses through an importer
// even where the policy lets something through:
//
//   - a record's ClusterSetIP counts only when it lies inside this
//     importer's clusterset ranges and inside a block the record's cluster
//     owns (the block claims on the broker, vipalloc.Owners), or is a
//     copy of what the block's owner gave the same service
//     (vipalloc.Rule, which the exporters apply too);
//   - a remote endpoint counts only when its addresses lie inside the pod
//     CIDRs the broker's administrator declared for its cluster
//     (broker.ParseDeclaration);
//   - a record counts only when the broker's export rules let its cluster
//     export its namespace (broker.ExportRules), whenever it was written.
//
// What is rejected is said on the ServiceImport (the Rejected condition
// and a Warning event naming the cluster and the address), in a metric and
// in the log.

// Rejection reasons: the Rejected condition's reasons, the reasons of the
// Warning events on the ServiceImport, and the reason label of the
// metrics.
const (
	// ReasonClusterSetIPOutsideRange: a record's VIP is not inside the
	// importer's clusterset ranges (--clusterset-cidrs).
	ReasonClusterSetIPOutsideRange = vipalloc.ReasonOutsideRange
	// ReasonClusterSetIPNotOwned: a record's VIP is not inside a block its
	// cluster owns.
	ReasonClusterSetIPNotOwned = vipalloc.ReasonNotOwned
	// ReasonEndpointsOutsidePodCIDRs: endpoints of a cluster lie outside
	// the pod CIDRs declared for it.
	ReasonEndpointsOutsidePodCIDRs = "EndpointsOutsidePodCIDRs"
	// ReasonExportNotAllowed: the broker's export rules do not let the
	// record's cluster export its namespace; the record is left out whole.
	ReasonExportNotAllowed = "ExportNotAllowed"
)

// ConditionRejected is the type of the ServiceImport condition that says
// what the importer refused from the records: True with the reasons above
// (comma-joined) while it refuses something, absent otherwise.
const ConditionRejected = "Rejected"

// ReasonNoneRejected is the reason the condition gauge counts
// ServiceImports by when nothing of theirs is rejected.
const ReasonNoneRejected = "NoneRejected"

// trust holds what the broker's administrator and the claims say about the
// members: which cluster owns which ClusterSetIP block, and each member's
// declared pod CIDRs.
type trust struct {
	clusterSet []netip.Prefix

	mu     sync.RWMutex
	owners []vipalloc.Claim
	// declared holds each member's declaration; a member without one is
	// absent.
	declared map[string]broker.Declaration
	// rules are the broker's export rules.
	rules broker.ExportRules
}

// exportRules are the export rules as they stand now.
func (t *trust) exportRules() broker.ExportRules {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.rules
}

// rule is the VIP rule as the claims stand now.
func (t *trust) rule() vipalloc.Rule {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return vipalloc.Rule{ClusterSet: t.clusterSet, Owners: t.owners}
}

// vipIndex indexes valid records by their ClusterSetIPs, in canonical form.
func vipIndex(obj any) ([]string, error) {
	r, ok := cacheobj.Object[*record.Cached](obj)
	if !ok || r.Invalid != nil {
		return nil, nil
	}
	keys := make([]string, 0, len(r.Export.VIPs))
	for _, v := range r.Export.VIPs {
		if ip, err := netip.ParseAddr(v); err == nil {
			keys = append(keys, ip.Unmap().String())
		}
	}
	return keys, nil
}

// holdersOf returns every valid record holding vip.
func (c *Controller) holdersOf(vip netip.Addr) []vipalloc.Holding {
	objs, _ := c.records.ByIndex(byVIP, vip.Unmap().String())
	out := make([]vipalloc.Holding, 0, len(objs))
	for _, o := range objs {
		if r, ok := o.(*record.Cached); ok && r.Invalid == nil {
			out = append(out, vipalloc.HoldingOf(r.Export))
		}
	}
	return out
}

// enqueueVIPHolders resyncs the services of every record holding a VIP the
// given records hold: one service taking or letting go of an address
// changes whether another may hold it.
func (c *Controller) enqueueVIPHolders(objs ...any) {
	seen := map[string]bool{}
	for _, obj := range objs {
		vips, _ := vipIndex(obj)
		for _, v := range vips {
			if seen[v] {
				continue
			}
			seen[v] = true
			holders, _ := c.records.ByIndex(byVIP, v)
			for _, h := range holders {
				c.EnqueueService(h)
			}
		}
	}
}

// declaration returns cluster's declaration, and false when it has none.
func (t *trust) declaration(cluster string) (broker.Declaration, bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	d, ok := t.declared[cluster]
	return d, ok
}

// rejection is one thing the importer refused of one service's records.
type rejection struct {
	reason  string
	cluster string
	// what: the address, or for endpoints a summary; count: how many
	// (addresses or endpoints).
	what  string
	count int
}

// id tells rejections apart across syncs.
func (r rejection) id() string { return r.reason + "|" + r.cluster + "|" + r.what }

func (r rejection) message() string {
	switch r.reason {
	case ReasonClusterSetIPOutsideRange:
		return fmt.Sprintf("cluster %s: ClusterSetIP %s is outside the clusterset ranges; ignored", r.cluster, r.what)
	case ReasonClusterSetIPNotOwned:
		return fmt.Sprintf("cluster %s: ClusterSetIP %s; ignored", r.cluster, r.what)
	case ReasonEndpointsOutsidePodCIDRs:
		return fmt.Sprintf("cluster %s: %d endpoints outside its declared pod CIDRs dropped (%s)", r.cluster, r.count, r.what)
	case ReasonExportNotAllowed:
		return fmt.Sprintf("cluster %s: its export is left out: %s", r.cluster, r.what)
	}
	return fmt.Sprintf("cluster %s: %s", r.cluster, r.what)
}

// checkVIPs returns exports with every VIP the trust does not allow removed
// (a record whose VIP is refused counts as one without it, so the merge
// takes the next valid one), and what it removed. A refused VIP that the
// owning cluster's own record of the same service holds is a harmless copy
// (exporters copy the merged VIP into their records): it is removed without
// being reported, so that only a VIP that could take something is told.
func (c *Controller) checkVIPs(exports []record.Export) ([]record.Export, []rejection) {
	checked, refusals := c.trust.rule().Vet(exports, c.holdersOf)
	valid := map[string]bool{}
	for _, e := range checked {
		for _, v := range e.VIPs {
			valid[v] = true
		}
	}
	var out []rejection
	for _, r := range refusals {
		if valid[r.VIP] {
			continue
		}
		what := r.VIP
		if r.Reason == ReasonClusterSetIPNotOwned {
			if r.Owner == "" {
				what += " is in no claimed block"
			} else {
				what += " is in a block of cluster " + r.Owner
			}
		}
		out = append(out, rejection{reason: r.Reason, cluster: r.Cluster, what: what, count: 1})
	}
	return checked, out
}

// checkExportRules returns the exports the broker's export rules allow,
// and a rejection for each of the others: their clusters may not export
// the service's namespace (the broker refuses such writes; these were made
// before the rule).
func (c *Controller) checkExportRules(exports []record.Export) ([]record.Export, []rejection) {
	rules := c.trust.exportRules()
	if len(rules) == 0 {
		return exports, nil
	}
	var out []rejection
	kept := exports[:0:0]
	for _, e := range exports {
		if ok, rule := rules.Allows(e.Namespace, e.Cluster); !ok {
			out = append(out, rejection{reason: ReasonExportNotAllowed, cluster: e.Cluster, count: 1,
				what: fmt.Sprintf("the broker's export rule %s lets only %s export namespace %s", rule.Name, strings.Join(rule.Members, ","), e.Namespace)})
			continue
		}
		kept = append(kept, e)
	}
	return kept, out
}

// endpointFilter returns whether an endpoint of cluster is kept, and
// false for "keep everything" when the cluster has no declaration (see
// docs/importer.md: an undeclared member keeps its endpoints, and the
// importer says so once).
func (c *Controller) endpointFilter(cluster string) (func(discoveryv1.Endpoint) bool, *broker.Declaration) {
	d, ok := c.trust.declaration(cluster)
	if !ok {
		c.noteUndeclared(cluster)
		return nil, nil
	}
	return func(ep discoveryv1.Endpoint) bool {
		for _, a := range ep.Addresses {
			ip, err := netip.ParseAddr(a)
			if err != nil || !d.Contains(ip) {
				return false
			}
		}
		return true
	}, &d
}

// checkEndpoints counts the endpoints of cluster's slices that keep
// refuses, and describes them.
func checkEndpoints(cluster string, slices []*discoveryv1.EndpointSlice, keep func(discoveryv1.Endpoint) bool, d *broker.Declaration) (rejection, bool) {
	if keep == nil {
		return rejection{}, false
	}
	n := 0
	example := ""
	for _, s := range slices {
		for _, ep := range s.Endpoints {
			if len(ep.Addresses) == 0 || keep(ep) {
				continue
			}
			if n == 0 {
				example = ep.Addresses[0]
			}
			n++
		}
	}
	if n == 0 {
		return rejection{}, false
	}
	cidrs := make([]string, len(d.PodCIDRs))
	for i, p := range d.PodCIDRs {
		cidrs[i] = p.String()
	}
	what := fmt.Sprintf("declared %s; first %s", strings.Join(cidrs, ","), example)
	if len(cidrs) == 0 {
		what = "no pod CIDR declared; first " + example
	}
	return rejection{reason: ReasonEndpointsOutsidePodCIDRs, cluster: cluster, what: what, count: n}, true
}

// noteUndeclared says once per cluster that its endpoints are not checked.
func (c *Controller) noteUndeclared(cluster string) {
	c.trust.mu.Lock()
	said := c.undeclared[cluster]
	c.undeclared[cluster] = true
	n := len(c.undeclared)
	c.trust.mu.Unlock()
	if said {
		return
	}
	c.cfg.Metrics.setUndeclaredClusters(n)
	c.cfg.Logger.Info("A cluster has no member declaration on the broker: its endpoints are imported unchecked until the broker's administrator declares its pod CIDRs",
		"cluster", cluster, "brokerNamespace", c.cfg.BrokerNamespace, "declaration", broker.DeclarationName(cluster))
	c.cfg.Recorder.Eventf(c.live.Object(), corev1.EventTypeWarning, EventClusterUndeclared,
		"Cluster %s has no member declaration (ConfigMap %s/%s): its endpoints are imported without checking them against its pod CIDRs",
		cluster, c.cfg.BrokerNamespace, broker.DeclarationName(cluster))
}

// rulesChanged reloads the export rules and, once the importer runs,
// resyncs every service: a rule may let in or keep out any of them.
func (c *Controller) rulesChanged() {
	var cms []*corev1.ConfigMap
	for _, o := range c.rules.List() {
		if cm, ok := o.(*corev1.ConfigMap); ok {
			cms = append(cms, cm)
		}
	}
	rules := broker.ParseExportRules(cms)
	c.trust.mu.Lock()
	changed := !slices.EqualFunc(c.trust.rules, rules, func(a, b broker.ExportRule) bool {
		return a.Name == b.Name && slices.Equal(a.Namespaces, b.Namespaces) && slices.Equal(a.Members, b.Members)
	})
	c.trust.rules = rules
	c.trust.mu.Unlock()
	if !changed || !c.Synced() {
		return
	}
	c.cfg.Logger.V(2).Info("Export rules changed", "rules", len(rules))
	c.resyncAll()
}

// claimsChanged recomputes the block owners and resyncs every service
// whose records' VIPs change verdict.
func (c *Controller) claimsChanged() {
	claims, malformed := vipalloc.ParseClaims(c.claims.List())
	for _, err := range malformed {
		c.cfg.Logger.V(2).Info("Ignoring a malformed ClusterSetIP block claim", "err", err)
	}
	owners := vipalloc.Owners(claims)
	c.trust.mu.Lock()
	before := c.trust.owners
	c.trust.owners = owners
	c.trust.mu.Unlock()
	if slices.EqualFunc(before, owners, func(a, b vipalloc.Claim) bool { return a.Block == b.Block && a.Cluster == b.Cluster }) {
		return
	}
	c.cfg.Logger.V(2).Info("ClusterSetIP block owners changed", "owners", describeOwners(owners))
	if !c.Synced() {
		// Every service is synced when the importer starts.
		return
	}
	for _, o := range c.records.List() {
		r, ok := o.(*record.Cached)
		if !ok || r.Invalid != nil {
			continue
		}
		for _, vip := range r.Export.VIPs {
			ip, err := netip.ParseAddr(vip)
			if err != nil {
				continue
			}
			was, _ := vipalloc.OwnerOf(before, ip)
			now, _ := vipalloc.OwnerOf(owners, ip)
			if was != now {
				c.EnqueueService(r)
				break
			}
		}
	}
}

func describeOwners(owners []vipalloc.Claim) []string {
	out := make([]string, len(owners))
	for i, o := range owners {
		out[i] = o.Block.String() + "=" + o.Cluster
	}
	return out
}

// declarationsChanged reloads the member declarations and resyncs the
// services of every cluster whose declaration changed.
func (c *Controller) declarationsChanged() {
	declared := map[string]broker.Declaration{}
	for _, o := range c.declarations.List() {
		cm, ok := o.(*corev1.ConfigMap)
		if !ok {
			continue
		}
		d, err := broker.ParseDeclaration(cm)
		if err != nil {
			c.cfg.Logger.Info("Ignoring a malformed member declaration", "declaration", klog.KObj(cm), "err", err)
			continue
		}
		declared[d.Cluster] = d
	}
	c.trust.mu.Lock()
	before := c.trust.declared
	c.trust.declared = declared
	for cluster := range declared {
		delete(c.undeclared, cluster)
	}
	n := len(c.undeclared)
	c.trust.mu.Unlock()
	c.cfg.Metrics.setUndeclaredClusters(n)
	if !c.Synced() {
		return
	}
	changed := map[string]bool{}
	for cluster, d := range declared {
		if b, ok := before[cluster]; !ok || !slices.Equal(b.PodCIDRs, d.PodCIDRs) {
			changed[cluster] = true
		}
	}
	for cluster := range before {
		if _, ok := declared[cluster]; !ok {
			changed[cluster] = true
		}
	}
	for _, cluster := range slices.Sorted(maps.Keys(changed)) {
		c.cfg.Logger.V(2).Info("Member declaration changed", "cluster", cluster, "podCIDRs", declared[cluster].PodCIDRs)
		for _, key := range c.serviceKeysOfCluster(cluster) {
			c.Queue.Add(key)
		}
	}
}
