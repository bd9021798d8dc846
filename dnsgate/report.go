// Package dnsgate holds a ClusterSetIP back from the node's DNS until
// every node of the cluster carries it, so that a name is resolvable only
// once it is reachable from any pod, whichever node's mcsd answered the
// query (the cluster DNS forwards clusterset.local to the mcsd-dns Service,
// whose endpoints are every node's mcsd: the answering node is usually not
// the client's).
//
// Every node publishes a report in a Lease of its own, written only when
// the report changes (one write per burst of changes): a resourceVersion of
// ServiceImports up to which its data plane has seen every change
// (Through), and the ClusterSetIPs of the ServiceImports it has seen that
// its proxier does not carry yet (Pending). Since a node sees
// ServiceImports in resourceVersion order, every ClusterSetIP of a
// ServiceImport at or below Through is either carried by that node or
// listed in Pending.
//
// Through moves on only when something waits for it, so that the
// ServiceImport writes that bring no new ClusterSetIP (status, ports,
// endpoints' clusters) cost no report write on any node: a node advances it
// to the newest resourceVersion it has seen when a ServiceImport it sees
// brings a ClusterSetIP new to it, and when the summary's Wanted is above
// it. Wanted is the highest of the live nodes' Awaiting: the version of a
// ClusterSetIP a node carries and holds back because the summary's Through
// is below it, as a node that listed its ServiceImports anew (a restart)
// sees them at their newest versions.
//
// The controller (Aggregator) folds the reports of the live nodes into one
// summary Lease, SummaryLeaseName: the lowest Through and the union of the
// Pending lists. A node is live while its node agent's pod is Ready there:
// the kubelet already says so, so nothing is renewed to say it again, and a
// node whose pod is gone or not Ready holds nothing back. A node's DNS hands
// out a ClusterSetIP it carries once the summary's Through is at or above
// the resourceVersion of the ServiceImport that lists it and the summary
// does not list it as Pending: exactly when every live node carries it. So
// a batch of changes costs each node one write and one watch event of the
// summary, and the controller one watch event per report: O(nodes), where
// every node watching every report would cost O(nodes²).
//
// A node agent may write only its own node's report: the admission policy
// shipped in manifests/mcsd compares the Lease's name and holder with the
// node name the API server puts in the pod-bound token of the writer.
//
// It sits between the proxier (whose VIPObserver it is) and the DNS index
// (which it tells what it releases, in the same shape); it never reads or
// changes nftables, and DNS answers cost nothing more: the index filters
// when it publishes, not per query.
package dnsgate

import (
	"crypto/sha256"
	"encoding/hex"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	coordinationv1 "k8s.io/api/coordination/v1"
)

// The report's Lease: one per node, in mcsd's namespace, named for the
// node (LeaseName), held by it (spec.holderIdentity is the node's name),
// labelled so that every node lists them all.
const (
	// LabelComponent is set to ComponentNodeReport on every report Lease.
	LabelComponent      = "mcsd.io/component"
	ComponentNodeReport = "node-report"
	// AnnotationThrough holds the report's Through: the resourceVersion
	// of the newest ServiceImport the node has seen ("" before any).
	AnnotationThrough = "mcsd.io/carried-through"
	// AnnotationPending holds the ClusterSetIPs the node has seen but does
	// not carry yet, comma-separated.
	AnnotationPending = "mcsd.io/pending-clusterset-ips"
	// AnnotationAwaiting holds the report's Awaiting: the highest version
	// of a ClusterSetIP the node holds back for the summary's Through.
	AnnotationAwaiting = "mcsd.io/awaiting-through"

	leasePrefix = "mcsd-node-"

	// SummaryLeaseName is the Lease holding the cluster's summary of the
	// live nodes' reports, written by the controller alone (a node agent
	// may write only mcsd-node-<its node>), labelled ComponentSummary.
	SummaryLeaseName = "mcsd-dns-gate"
	ComponentSummary = "node-report-summary"
	// AnnotationLiveNodes holds the number of live nodes the summary
	// covers; AnnotationOrderless is "true" when their reports'
	// resourceVersions do not compare (every node then hands out what it
	// carries).
	AnnotationLiveNodes = "mcsd.io/live-nodes"
	AnnotationOrderless = "mcsd.io/orderless"
	// AnnotationWanted holds the summary's Wanted, the highest Awaiting of
	// the live nodes. A summary without it comes from a controller that
	// does not ask: every node then keeps its Through at the newest
	// version it has seen.
	AnnotationWanted = "mcsd.io/wanted-through"
)

// LeaseName is the name of a node's report Lease: its name, or a digest of
// it when the name is too long to carry the prefix.
func LeaseName(node string) string {
	if len(leasePrefix)+len(node) <= 253 {
		return leasePrefix + node
	}
	sum := sha256.Sum256([]byte(node))
	return leasePrefix + hex.EncodeToString(sum[:16])
}

// Report is what one node says about its data plane.
type Report struct {
	// Through is the resourceVersion of the newest ServiceImport seen,
	// "" when none.
	Through string
	// Pending are the ClusterSetIPs of ServiceImports up to Through that
	// the node does not carry yet.
	Pending []netip.Addr
	// Awaiting is the highest version of a ClusterSetIP this node has
	// held back for the summary's Through ("" when none); it never goes
	// down.
	Awaiting string
	// knowsWanted says the report came from a node that moves its Through
	// on when asked (one without it is an older version's, during an
	// upgrade).
	knowsWanted bool
}

// annotate writes the report into a Lease's annotations.
func (r Report) annotate(l *coordinationv1.Lease) {
	if l.Annotations == nil {
		l.Annotations = map[string]string{}
	}
	l.Annotations[AnnotationThrough] = r.Through
	pending := make([]string, len(r.Pending))
	for i, a := range r.Pending {
		pending[i] = a.String()
	}
	slices.Sort(pending)
	l.Annotations[AnnotationPending] = strings.Join(pending, ",")
	// Written when empty too: it says the node knows Wanted.
	l.Annotations[AnnotationAwaiting] = r.Awaiting
}

// reportOf reads a report from a Lease's annotations. An address that does
// not parse is skipped: a report can only hold back what it names.
func reportOf(l *coordinationv1.Lease) Report {
	r := Report{Through: l.Annotations[AnnotationThrough]}
	r.Awaiting, r.knowsWanted = l.Annotations[AnnotationAwaiting]
	for _, s := range strings.Split(l.Annotations[AnnotationPending], ",") {
		if a, err := netip.ParseAddr(s); err == nil {
			r.Pending = append(r.Pending, a.Unmap())
		}
	}
	return r
}

// equal says whether two reports say the same.
func (r Report) equal(o Report) bool {
	return r.Through == o.Through && r.Awaiting == o.Awaiting && slices.Equal(r.Pending, o.Pending)
}

// Summary is what the live nodes' reports say together.
type Summary struct {
	// Report's Through is the lowest of the live nodes' ("" when one has
	// seen no ServiceImport, or the union of Pending was too long to list),
	// and Pending the union of theirs.
	Report
	LiveNodes int
	Orderless bool
	// Wanted is the highest Awaiting of the live nodes. Asks says the
	// summary carries it: written by a controller that knows of it, with
	// every live node knowing of it too. Otherwise every node keeps its
	// Through at the newest version it has seen, as an older node does
	// and waits for.
	Wanted string
	Asks   bool
}

func (s Summary) annotate(l *coordinationv1.Lease) {
	s.Report.annotate(l)
	l.Annotations[AnnotationLiveNodes] = strconv.Itoa(s.LiveNodes)
	l.Annotations[AnnotationOrderless] = strconv.FormatBool(s.Orderless)
	if s.Asks {
		l.Annotations[AnnotationWanted] = s.Wanted
	} else {
		delete(l.Annotations, AnnotationWanted)
	}
}

// summaryOf reads a summary from its Lease; a count that does not parse is
// no live node.
func summaryOf(l *coordinationv1.Lease) Summary {
	s := Summary{Report: reportOf(l)}
	s.LiveNodes, _ = strconv.Atoi(l.Annotations[AnnotationLiveNodes])
	s.Orderless = l.Annotations[AnnotationOrderless] == "true"
	s.Wanted, s.Asks = l.Annotations[AnnotationWanted]
	return s
}

func (s Summary) equal(o Summary) bool {
	return s.Report.equal(o.Report) && s.LiveNodes == o.LiveNodes && s.Orderless == o.Orderless && s.Wanted == o.Wanted && s.Asks == o.Asks
}
