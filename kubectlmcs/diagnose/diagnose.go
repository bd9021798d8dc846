// Package diagnose checks one member cluster's part of a clusterset, each
// check passing or failing with what to do about it: the CRDs, the cluster
// ID, the member's broker credentials and what the broker lets them do,
// ClusterSetIP blocks, clocks, declared CIDRs, namespaces that several
// members export without an export rule (a warning), CoreDNS, the node
// agents, and whether its pods and those of other members reach each
// other. It
// reads, makes dry-run writes on the broker as the member, and runs
// short-lived probe pods in mcsd's namespace of the members it checks
// reachability with, which it removes.
package diagnose

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	aboutv1beta1 "github.com/mcsd-io/mcsd/apis/about/v1beta1"
	"github.com/mcsd-io/mcsd/broker"
	"github.com/mcsd-io/mcsd/internal/corefile"
	"github.com/mcsd-io/mcsd/internal/record"
	"github.com/mcsd-io/mcsd/kubectlmcs/membership"
	"github.com/mcsd-io/mcsd/kubectlmcs/status"
	"github.com/mcsd-io/mcsd/liveness"
	"github.com/mcsd-io/mcsd/vipalloc"
)

// Outcomes of a check.
const (
	Pass = "PASS"
	Fail = "FAIL"
	// Skip: the check could not run, because an earlier one failed or
	// what it needs is absent.
	Skip = "SKIP"
	// Warn: nothing is broken, but something is open that the operator
	// would likely close; it does not fail the run.
	Warn = "WARN"
)

// Check is the outcome of one check.
type Check struct {
	Name   string `json:"name"`
	Result string `json:"result"`
	Detail string `json:"detail,omitempty"`
	// Fix says what to do when the check fails.
	Fix string `json:"fix,omitempty"`
}

// Options of Run.
type Options struct {
	// ClusterID overrides the member's resolved cluster ID.
	ClusterID string
	// BrokerNamespace overrides the namespace of the member's broker
	// kubeconfig (default broker.DefaultNamespace).
	BrokerNamespace string
	// MaxClockSkew is how far a cluster's clock may be from the broker's
	// (default 5 s, what importers allow on first sight of a Lease).
	MaxClockSkew time.Duration
	// ClusterTTL is how old the member's Lease may be before importers
	// count it gone (default liveness.DefaultTTL).
	ClusterTTL time.Duration
	// Peers are other members to check pod reachability with, both ways;
	// without them that check is skipped.
	Peers []Peer
	// SkipReachability leaves the reachability check out, for clusters
	// where diagnose may not create pods.
	SkipReachability bool
	// ReachTimeout is how long a pod tries to connect to another member's
	// probe (default DefaultReachTimeout).
	ReachTimeout time.Duration
}

// DefaultMaxClockSkew is importers' allowance for clock skew between
// clusters (liveness.DefaultClockSkew).
const DefaultMaxClockSkew = 5 * time.Second

// CRDs are the CRDs a member needs, with the version mcsd uses of each.
var CRDs = []struct{ Name, Version string }{
	{"serviceexports.multicluster.x-k8s.io", "v1beta1"},
	{"serviceimports.multicluster.x-k8s.io", "v1beta1"},
	{aboutv1beta1.Resource + "." + aboutv1beta1.GroupName, aboutv1beta1.SchemeGroupVersion.Version},
}

// Failed reports whether any check failed.
func Failed(checks []Check) bool {
	return slices.ContainsFunc(checks, func(c Check) bool { return c.Result == Fail })
}

type run struct {
	member     *rest.Config
	kube       kubernetes.Interface
	opts       Options
	checks     []Check
	id         string
	brokerKube kubernetes.Interface
	namespace  string
	snapshot   *status.Snapshot
	// fetch reads a pod's health or metrics; nil means through the API
	// server's pod proxy.
	fetch fetchFunc
}

func (r *run) add(name, result, detail, fix string) {
	if result == Pass {
		fix = ""
	}
	r.checks = append(r.checks, Check{Name: name, Result: result, Detail: detail, Fix: fix})
}

func (r *run) skip(name, why string) { r.add(name, Skip, why, "") }

// Run runs every check against the member cluster that member (an
// administrator's configuration) reaches, and the broker as the member's
// own identity (its Secret mcsd-system/mcsd-broker); pod reachability also
// against opts.Peers.
func Run(ctx context.Context, member *rest.Config, opts Options) ([]Check, error) {
	if opts.MaxClockSkew <= 0 {
		opts.MaxClockSkew = DefaultMaxClockSkew
	}
	if opts.ClusterTTL <= 0 {
		opts.ClusterTTL = liveness.DefaultTTL
	}
	kube, err := kubernetes.NewForConfig(member)
	if err != nil {
		return nil, err
	}
	r := &run{member: member, kube: kube, opts: opts}
	r.crds(ctx)
	r.clusterID(ctx)
	if r.credentials(ctx) {
		r.identity(ctx)
		r.writes(ctx)
		if r.snapshot != nil {
			r.declaration()
			r.heartbeat()
			r.blocks()
			r.clocks()
			r.cidrs(ctx)
			r.exportRules(ctx)
		} else {
			for _, n := range []string{"declaration", "heartbeat", "ClusterSetIP blocks", "clock skew", "CIDRs", "export rules"} {
				r.skip(n, "the broker cannot be read")
			}
		}
	}
	r.coreDNS(ctx)
	r.pods(ctx)
	r.reachability(ctx)
	return r.checks, nil
}

func (r *run) crds(ctx context.Context) {
	ext, err := apiextclient.NewForConfig(r.member)
	if err != nil {
		r.add("CRDs", Fail, err.Error(), "")
		return
	}
	for _, want := range CRDs {
		name := "CRD " + want.Name
		fix := "install the CRDs: kubectl apply -k manifests/crds"
		crd, err := ext.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, want.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			r.add(name, Fail, "not installed", fix)
			continue
		}
		if err != nil {
			r.add(name, Fail, err.Error(), "check the member's API server and your rights to read CRDs")
			continue
		}
		var served []string
		for _, v := range crd.Spec.Versions {
			if v.Served {
				served = append(served, v.Name)
			}
		}
		detail := "served " + strings.Join(served, ",")
		switch {
		case !established(crd):
			r.add(name, Fail, detail+"; not Established", "see the CRD's conditions: kubectl get crd "+want.Name+" -o yaml")
		case !slices.Contains(served, want.Version):
			r.add(name, Fail, detail+"; mcsd needs "+want.Version, fix+" (of this mcsd version)")
		default:
			r.add(name, Pass, detail, "")
		}
		if want.Name == CRDs[2].Name {
			r.immutable(crd)
		}
	}
}

func established(crd *apiextv1.CustomResourceDefinition) bool {
	for _, c := range crd.Status.Conditions {
		if c.Type == apiextv1.Established && c.Status == apiextv1.ConditionTrue {
			return true
		}
	}
	return false
}

// immutable checks that the ClusterProperty CRD refuses changing the
// cluster ID (KEP-2149): a validation rule comparing the value with the
// old one, in every served version.
func (r *run) immutable(crd *apiextv1.CustomResourceDefinition) {
	const name = "cluster ID immutable"
	for _, v := range crd.Spec.Versions {
		if !v.Served {
			continue
		}
		found := false
		if v.Schema != nil && v.Schema.OpenAPIV3Schema != nil {
			for _, rule := range v.Schema.OpenAPIV3Schema.XValidations {
				if strings.Contains(rule.Rule, aboutv1beta1.ClusterIDName) && strings.Contains(rule.Rule, "oldSelf.spec.value") {
					found = true
				}
			}
		}
		if !found {
			r.add(name, Fail, "version "+v.Name+" of "+crd.Name+" has no rule keeping "+aboutv1beta1.ClusterIDName+" unchanged",
				"install mcsd's ClusterProperty CRD: kubectl apply -k manifests/crds")
			return
		}
	}
	r.add(name, Pass, "the CRD refuses changes to "+aboutv1beta1.ClusterIDName, "")
}

func (r *run) clusterID(ctx context.Context) {
	const name = "cluster ID"
	dyn, err := dynamic.NewForConfig(r.member)
	if err != nil {
		r.add(name, Fail, err.Error(), "")
		return
	}
	id, source, err := membership.ResolveClusterID(ctx, r.kube, dyn, r.opts.ClusterID)
	if err != nil {
		r.add(name, Fail, err.Error(), "fix or delete the ClusterProperty "+aboutv1beta1.ClusterIDName+", or give a valid --cluster-id (an RFC 1123 label)")
		return
	}
	r.id = id
	r.add(name, Pass, id+" (from the "+string(source)+"), a valid RFC 1123 label", "")
}

// credentials reads the member's broker kubeconfig and reaches the broker
// with it; it reports whether the broker checks can run.
func (r *run) credentials(ctx context.Context) bool {
	const name = "broker reachable"
	cfg, ns, err := membership.BrokerConfig(ctx, r.kube)
	if err != nil {
		r.add(name, Fail, err.Error(), "join the cluster: kubectl mcs join --broker-context BROKER --context MEMBER --pod-cidrs ...")
		for _, n := range []string{"broker identity", "writes own records", "others' records refused", "declaration", "heartbeat", "ClusterSetIP blocks", "clock skew", "CIDRs", "export rules"} {
			r.skip(n, "no broker credentials")
		}
		return false
	}
	r.namespace = cmpOr(r.opts.BrokerNamespace, ns, broker.DefaultNamespace)
	cfg = rest.CopyConfig(cfg)
	cfg.Timeout = 15 * time.Second
	c, err := status.NewClients(cfg)
	if err != nil {
		r.add(name, Fail, err.Error(), "")
		return false
	}
	r.brokerKube = c.Kube
	mcs := c.MCS
	r.snapshot, err = status.Read(ctx, r.brokerKube, mcs, r.namespace)
	if err != nil {
		fix := "check that the member reaches the broker's URL in its Secret " + membership.SecretNamespace + "/" + membership.SecretName + " and that its identity exists there (kubectl mcs join again)"
		if apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err) {
			fix = "the broker refuses the member's identity: join again (kubectl mcs join) to restore its ServiceAccount cluster-" + r.id + " and RoleBinding mcsd-member-" + r.id
		}
		r.add(name, Fail, fmt.Sprintf("%s, with the member's credentials: %v", cfg.Host, err), fix)
		r.snapshot = nil
		return true
	}
	r.add(name, Pass, cfg.Host+", namespace "+r.namespace+", with the member's own credentials", "")
	return true
}

func (r *run) identity(ctx context.Context) {
	const name = "broker identity"
	review, err := r.brokerKube.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		r.add(name, Fail, "cannot ask the broker who the credentials are: "+err.Error(), "")
		return
	}
	user := review.Status.UserInfo.Username
	want := "system:serviceaccount:" + r.namespace + ":" + broker.ServiceAccountName(r.id)
	if r.id == "" || user != want {
		r.add(name, Fail, fmt.Sprintf("the credentials are %s, want %s", user, want),
			"the Secret holds another identity: join this cluster again (kubectl mcs join)")
		return
	}
	r.add(name, Pass, user, "")
}

// writes makes two dry-run writes as the member in its own namespace: an
// EndpointSlice of its own, which the broker must let through, and one
// under another cluster's name, which the admission policy must refuse.
// Slices, not the Lease: the quota allows one Lease, which exists.
func (r *run) writes(ctx context.Context) {
	dry := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	own := record.MemberNamespace(r.namespace, r.id)
	slices := r.brokerKube.DiscoveryV1().EndpointSlices(own)
	const probeNS, probeName = "mcsd-diagnose", "probe"
	slice := func(cluster string) *discoveryv1.EndpointSlice {
		return &discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{
				Name: record.EndpointSliceName(cluster, probeNS, probeName, discoveryv1.AddressTypeIPv4, 0), Namespace: own,
				Labels: record.EndpointSliceLabels(r.id, probeNS, probeName),
			},
			AddressType: discoveryv1.AddressTypeIPv4,
		}
	}
	mine := slice(r.id).Name
	_, err := slices.Create(ctx, slice(r.id), dry)
	switch {
	case err == nil || apierrors.IsAlreadyExists(err):
		// AlreadyExists comes from storage, after admission let it in.
		r.add("writes own records", Pass, "a dry-run create of EndpointSlice "+mine+" in "+own+" is allowed", "")
	case apierrors.IsForbidden(err) && strings.Contains(err.Error(), "exceeded quota"):
		r.add("writes own records", Fail, "the member's namespace "+own+" is at its quota: "+err.Error(),
			"withdraw exports, or have the broker's administrator raise the member budget (kubectl mcs broker install --member-budget)")
	case apierrors.IsForbidden(err):
		r.add("writes own records", Fail, "a dry-run create of its own EndpointSlice "+mine+" in "+own+" is refused: "+err.Error(),
			"the identity lacks its rights, or its namespace: join again (kubectl mcs join) to restore namespace "+own+" and its RoleBinding "+broker.MemberWriterRole+", and check ClusterRole "+broker.MemberWriterRole)
	default:
		r.add("writes own records", Fail, "a dry-run create of its own EndpointSlice failed: "+err.Error(), "")
	}
	other := "mcsd-diagnose-probe"
	if r.snapshot != nil {
		for _, d := range r.snapshot.Declarations {
			if d.Cluster != r.id {
				other = d.Cluster
				break
			}
		}
	}
	theirs := slice(other).Name
	_, err = slices.Create(ctx, slice(other), dry)
	switch {
	case (apierrors.IsForbidden(err) || apierrors.IsInvalid(err)) && !strings.Contains(err.Error(), "exceeded quota"):
		r.add("others' records refused", Pass, "a dry-run create of EndpointSlice "+theirs+" is refused", "")
	case err == nil || apierrors.IsAlreadyExists(err):
		r.add("others' records refused", Fail, "a dry-run create of "+other+"'s EndpointSlice "+theirs+" was accepted: the broker does not bind members to their own records",
			"install the broker's admission policies: kubectl mcs broker install --context BROKER")
	default:
		r.add("others' records refused", Fail, "a dry-run create of another cluster's EndpointSlice failed otherwise: "+err.Error(), "")
	}
}

func (r *run) declaration() {
	const name = "declaration"
	for _, d := range r.snapshot.Declarations {
		if d.Cluster != r.id {
			continue
		}
		if len(d.PodCIDRs) == 0 {
			r.add(name, Fail, "declared without pod CIDRs: the broker refuses every endpoint", "join again with --pod-cidrs")
			return
		}
		r.add(name, Pass, "pod CIDRs "+joinPrefixes(d.PodCIDRs), "")
		return
	}
	r.add(name, Fail, "the broker has no declaration "+broker.DeclarationName(r.id)+": its endpoints are refused",
		"join again: kubectl mcs join --pod-cidrs ...")
}

// heartbeat checks that the member's Lease on the broker is renewed within
// the TTL, as importers judge it (on this machine's clock here).
func (r *run) heartbeat() {
	const name = "heartbeat"
	fix := "mcsd renews the Lease " + record.LeaseName(r.id) + " on the broker: check that it runs (kubectl -n mcsd-system get pods), reaches the broker, and its logs"
	for _, l := range r.snapshot.Leases {
		if l.Labels[record.LabelSourceCluster] != r.id {
			continue
		}
		if l.Spec.RenewTime == nil {
			r.add(name, Fail, "Lease "+record.LeaseName(r.id)+" was never renewed: other clusters drop this cluster's endpoints", fix)
			return
		}
		age := r.snapshot.Read.Sub(l.Spec.RenewTime.Time)
		if age > r.opts.ClusterTTL {
			r.add(name, Fail, fmt.Sprintf("Lease %s not renewed for %s (more than %s): other clusters drop this cluster's endpoints", record.LeaseName(r.id), age.Round(time.Second), r.opts.ClusterTTL), fix)
			return
		}
		r.add(name, Pass, fmt.Sprintf("Lease %s renewed %s ago", record.LeaseName(r.id), age.Round(100*time.Millisecond)), "")
		return
	}
	r.add(name, Fail, "no Lease "+record.LeaseName(r.id)+" on the broker: other clusters do not import this cluster's endpoints", fix)
}

func (r *run) blocks() {
	const name = "ClusterSetIP blocks"
	owners := vipalloc.Owners(r.snapshot.Claims)
	var own, lost []string
	for _, c := range r.snapshot.Claims {
		if c.Cluster != r.id {
			continue
		}
		if slices.ContainsFunc(owners, func(o vipalloc.Claim) bool { return o.Name == c.Name }) {
			own = append(own, c.Block.String())
		} else {
			lost = append(lost, c.Block.String())
		}
	}
	switch {
	case len(lost) > 0:
		r.add(name, Fail, "claims "+strings.Join(lost, ",")+" overlap older claims of other clusters and own nothing",
			"delete the claims ("+vipalloc.ClaimName(r.id, corev1.IPv4Protocol)+", -ipv6) on the broker and restart mcsd, or give it free --cluster-vip-cidrs")
	case len(own) == 0:
		r.add(name, Fail, "no ClusterSetIP block claimed on the broker",
			"mcsd claims its blocks when it starts: check that it runs (kubectl -n mcsd-system get pods) and its logs")
	default:
		r.add(name, Pass, "owns "+strings.Join(own, ","), "")
	}
}

// clocks compares each cluster's Lease renewTime, written on that
// cluster's clock, with when the broker's API server stored it (the time of
// the Lease's last managedFields entry, on the broker's clock, to the
// second).
func (r *run) clocks() {
	const name = "clock skew"
	var bad, seen []string
	for _, l := range r.snapshot.Leases {
		if l.Spec.RenewTime == nil {
			continue
		}
		stored, ok := lastWrite(&l)
		if !ok {
			continue
		}
		// stored is truncated to the second: the skew is in
		// [skew, skew+1s).
		skew := l.Spec.RenewTime.Sub(stored.Add(500 * time.Millisecond)).Round(time.Second)
		id := l.Labels[record.LabelSourceCluster]
		seen = append(seen, fmt.Sprintf("%s %+ds", id, int(skew.Seconds())))
		if skew > r.opts.MaxClockSkew || -skew > r.opts.MaxClockSkew {
			bad = append(bad, fmt.Sprintf("%s is %s off", id, skew))
		}
	}
	switch {
	case len(seen) == 0:
		r.add(name, Fail, "no Lease has been renewed on the broker: no clock to compare", "check that mcsd runs in the members")
	case len(bad) > 0:
		r.add(name, Fail, strings.Join(bad, "; ")+fmt.Sprintf(" from the broker's clock (more than %s)", r.opts.MaxClockSkew),
			"synchronise the clusters' clocks (NTP); importers judge a Lease first seen by its renewTime")
	default:
		r.add(name, Pass, "renewTime against the broker's clock: "+strings.Join(seen, ", "), "")
	}
}

func lastWrite(l *coordinationv1.Lease) (time.Time, bool) {
	var t time.Time
	for _, f := range l.ManagedFields {
		if f.Time != nil && f.Time.After(t) {
			t = f.Time.Time
		}
	}
	return t, !t.IsZero()
}

// cidrs looks for overlaps among the declared pod CIDRs of all clusters,
// and between this cluster's service CIDRs and them.
func (r *run) cidrs(ctx context.Context) {
	const name = "CIDRs"
	type owned struct {
		p    netip.Prefix
		what string
	}
	var all []owned
	for _, d := range r.snapshot.Declarations {
		for _, p := range d.PodCIDRs {
			all = append(all, owned{p, d.Cluster + " pods " + p.String()})
		}
	}
	services, err := r.kube.NetworkingV1().ServiceCIDRs().List(ctx, metav1.ListOptions{})
	checked := "the clusters' declared pod CIDRs"
	if err == nil {
		checked += ", this cluster's service CIDRs"
		for _, s := range services.Items {
			for _, c := range s.Spec.CIDRs {
				if p, err := netip.ParsePrefix(c); err == nil {
					all = append(all, owned{p.Masked(), r.id + " services " + p.Masked().String()})
				}
			}
		}
	}
	var overlaps []string
	for i := range all {
		for j := i + 1; j < len(all); j++ {
			if all[i].p.Overlaps(all[j].p) {
				overlaps = append(overlaps, all[i].what+" overlaps "+all[j].what)
			}
		}
	}
	if len(overlaps) > 0 {
		r.add(name, Fail, strings.Join(overlaps, "; "),
			"clusters must have distinct pod and service ranges: the broker refuses endpoints outside each member's declaration, and importers cannot tell overlapping addresses apart; fix the declaration with kubectl mcs join --pod-cidrs")
		return
	}
	r.add(name, Pass, fmt.Sprintf("no overlap among %d ranges (%s)", len(all), checked), "")
}

// coreDNS checks that the Corefile in kube-system/coredns forwards
// clusterset.local to the mcsd-dns Service.
func (r *run) coreDNS(ctx context.Context) {
	const name = "CoreDNS forwards clusterset.local"
	fix := "run kubectl mcs join again, which configures the cluster DNS; or add the server block of manifests/mcsd/coredns-snippet.yaml to the Corefile in kube-system/coredns, with the ClusterIP of mcsd-system/mcsd-dns"
	svc, err := r.kube.CoreV1().Services("mcsd-system").Get(ctx, "mcsd-dns", metav1.GetOptions{})
	if err != nil {
		r.add(name, Fail, "no Service mcsd-system/mcsd-dns: "+err.Error(), "install mcsd: kubectl apply -k manifests/mcsd")
		return
	}
	cm, err := r.kube.CoreV1().ConfigMaps(metav1.NamespaceSystem).Get(ctx, "coredns", metav1.GetOptions{})
	if err != nil {
		r.add(name, Fail, "no ConfigMap kube-system/coredns: "+err.Error(), "this check knows CoreDNS only; "+fix)
		return
	}
	_, found, err := corefile.Block(cm.Data["Corefile"], "clusterset.local")
	if err != nil {
		r.add(name, Fail, "the Corefile cannot be read: "+err.Error(), fix)
		return
	}
	if !found {
		r.add(name, Fail, "the Corefile has no server block for clusterset.local", fix)
		return
	}
	targets, _ := corefile.Forwards(cm.Data["Corefile"], "clusterset.local")
	ips := svc.Spec.ClusterIPs
	if len(ips) == 0 && svc.Spec.ClusterIP != "" {
		ips = []string{svc.Spec.ClusterIP}
	}
	for _, t := range targets {
		host := strings.TrimPrefix(t, "dns://")
		if h, _, ok := strings.Cut(host, ":"); ok && !strings.Contains(h, "]") && strings.Count(host, ":") == 1 {
			host = h
		}
		host = strings.Trim(host, "[]")
		if slices.Contains(ips, host) {
			r.add(name, Pass, "forwards to "+t+" (mcsd-system/mcsd-dns)", "")
			return
		}
	}
	r.add(name, Fail, fmt.Sprintf("clusterset.local is forwarded to %s, not to mcsd-dns (%s)", strings.Join(targets, " "), strings.Join(ips, ",")), fix)
}

func joinPrefixes(ps []netip.Prefix) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.String()
	}
	return strings.Join(s, ",")
}

func cmpOr(vals ...string) string {
	for _, v := range vals {
		if v != "" {
			return v
		}
	}
	return ""
}
