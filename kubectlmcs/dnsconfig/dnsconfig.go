// Package dnsconfig finds a member cluster's DNS and plans the change that
// makes it forward the clusterset zone and the reverse zones of the
// ClusterSetIPs to mcsd, or takes it back: CoreDNS's Corefile (or, where
// the Corefile imports server blocks from a ConfigMap as k3s and AKS do,
// that ConfigMap), NodeLocal DNSCache's Corefile, and kube-dns's stub
// domains. It applies only what the cluster's owner may edit: a Corefile
// the platform reconciles, and kube-dns, get the exact change to make by
// hand. It edits Corefiles as text (package corefile), leaving every
// other byte as it was.
package dnsconfig

import (
	"context"
	"fmt"
	"net/netip"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/mcsd-io/mcsd/dns"
	"github.com/mcsd-io/mcsd/internal/corefile"
	"github.com/mcsd-io/mcsd/manifests"
)

// Where cluster DNS is configured: ConfigMaps (and workloads) of
// kube-system.
const (
	// CoreDNS is CoreDNS's ConfigMap; CorefileKey its Corefile.
	CoreDNS     = "coredns"
	CorefileKey = "Corefile"
	// CoreDNSCustom is the ConfigMap whose *.server keys a Corefile
	// imports as server blocks (k3s: import /etc/coredns/custom/*.server;
	// AKS: import custom/*.server); CustomKey is mcsd's.
	CoreDNSCustom = "coredns-custom"
	CustomKey     = "mcsd-clusterset.server"
	// NodeLocalDNS is NodeLocal DNSCache's ConfigMap (key Corefile) and
	// DaemonSet.
	NodeLocalDNS = "node-local-dns"
	// KubeDNS is kube-dns's ConfigMap (key stubDomains) and Deployment.
	KubeDNS        = "kube-dns"
	StubDomainsKey = "stubDomains"
	// LabelAddonMode, with the value Reconcile, marks an object the
	// addon manager puts back as it ships it: an edit would be undone.
	LabelAddonMode = "addonmanager.kubernetes.io/mode"
)

// Change is one ConfigMap of the cluster DNS to change.
type Change struct {
	// Before is the ConfigMap as it is (nil: it does not exist), After as
	// it should be (nil where nothing can be written: no DNS was found).
	Before, After *corev1.ConfigMap
	// What says what the change does.
	What string
	// Manual, when not empty, says why the change must be made by hand;
	// Apply leaves it.
	Manual string
}

// Plan is what the member's DNS needs.
type Plan struct {
	// Found says which DNS the member has.
	Found []string
	// Changes are those needed; none when the DNS is as it should be.
	Changes []Change
}

// Manual are the changes to make by hand.
func (p Plan) Manual() []Change {
	var out []Change
	for _, c := range p.Changes {
		if c.Manual != "" {
			out = append(out, c)
		}
	}
	return out
}

// ServerBlock is the shipped server block (manifests.CoreDNSServerBlock)
// forwarding the clusterset zone and the reverse zones of clusterSetCIDRs
// to target, mcsd-dns's ClusterIP. Without clusterSetCIDRs the block
// keeps the reverse zones of the default ranges.
func ServerBlock(target string, clusterSetCIDRs []netip.Prefix) (string, error) {
	block, err := manifests.CoreDNSServerBlock(target)
	if err != nil {
		return "", err
	}
	if len(clusterSetCIDRs) == 0 {
		return block, nil
	}
	zones := []string{zone}
	for _, p := range clusterSetCIDRs {
		zones = append(zones, strings.TrimSuffix(dns.ReverseZone(p), "."))
	}
	_, rest, _ := strings.Cut(block, "{")
	return strings.Join(zones, " ") + " {" + rest, nil
}

// zonesOf are the zones of a server block.
func zonesOf(block string) ([]string, error) {
	entries, err := corefile.Parse(block)
	if err != nil || len(entries) != 1 {
		return nil, fmt.Errorf("not one server block: %v", err)
	}
	var zones []string
	for _, k := range entries[0].Keys {
		zones = append(zones, corefile.Zone(k))
	}
	return zones, nil
}

// zone is the clusterset zone, as server blocks name it.
var zone = strings.TrimSuffix(dns.DefaultZone, ".")

// reader reads kube-system's DNS objects, an absent one as nil.
type reader struct{ kube kubernetes.Interface }

func (r reader) configMap(ctx context.Context, name string) (*corev1.ConfigMap, error) {
	cm, err := r.kube.CoreV1().ConfigMaps(metav1.NamespaceSystem).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading ConfigMap %s/%s: %w", metav1.NamespaceSystem, name, err)
	}
	return cm, nil
}

func (r reader) exists(ctx context.Context, kind, name string) (bool, error) {
	var err error
	switch kind {
	case "DaemonSet":
		_, err = r.kube.AppsV1().DaemonSets(metav1.NamespaceSystem).Get(ctx, name, metav1.GetOptions{})
	default:
		_, err = r.kube.AppsV1().Deployments(metav1.NamespaceSystem).Get(ctx, name, metav1.GetOptions{})
	}
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("reading %s %s/%s: %w", kind, metav1.NamespaceSystem, name, err)
	}
	return true, nil
}

// reconciled says why cm must not be edited, "" when it may.
func reconciled(cm *corev1.ConfigMap) string {
	if cm != nil && cm.Labels[LabelAddonMode] == "Reconcile" {
		return fmt.Sprintf("ConfigMap %s/%s is reconciled by the addon manager (label %s=Reconcile), which would undo an edit: make this change where the platform lets you configure its DNS",
			cm.Namespace, cm.Name, LabelAddonMode)
	}
	return ""
}

// importsServerBlocks says whether a Corefile imports server blocks from
// files, as k3s's and AKS's do from coredns-custom's *.server keys.
func importsServerBlocks(cf string) (bool, error) {
	imports, err := corefile.Imports(cf)
	if err != nil {
		return false, err
	}
	for _, i := range imports {
		if strings.HasSuffix(i, "*.server") {
			return true, nil
		}
	}
	return false, nil
}

// withData is a copy of cm (or a new ConfigMap name of kube-system) with
// key set to value, or removed when value is nil.
func withData(cm *corev1.ConfigMap, name, key string, value *string) *corev1.ConfigMap {
	out := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceSystem, Name: name}}
	if cm != nil {
		out = cm.DeepCopy()
	}
	if out.Data == nil {
		out.Data = map[string]string{}
	}
	if value == nil {
		delete(out.Data, key)
	} else {
		out.Data[key] = *value
	}
	return out
}
