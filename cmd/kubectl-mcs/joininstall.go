package main

import (
	"context"
	"fmt"
	"net/netip"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apiextclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/mcsd-io/mcsd/broker"
	"github.com/mcsd-io/mcsd/internal/ipfamilies"
	"github.com/mcsd-io/mcsd/internal/version"
	"github.com/mcsd-io/mcsd/kubectlmcs/install"
	"github.com/mcsd-io/mcsd/kubectlmcs/membership"
	"github.com/mcsd-io/mcsd/kubectlmcs/status"
)

// memberPodCIDRs are --pod-cidrs, else the values' podCIDRs, else the
// member's nodes' pod ranges.
func (o *joinOptions) memberPodCIDRs(ctx context.Context, member kubernetes.Interface, values map[string]any) ([]netip.Prefix, error) {
	cidrs, err := parsePrefixes(o.podCIDRs)
	if err != nil {
		return nil, fmt.Errorf("--pod-cidrs: %w", err)
	}
	if len(cidrs) > 0 {
		return cidrs, nil
	}
	if given, ok := values["podCIDRs"].([]any); ok && len(given) > 0 {
		s := make([]string, len(given))
		for i, c := range given {
			s[i] = fmt.Sprint(c)
		}
		if cidrs, err = parsePrefixes(strings.Join(s, ",")); err != nil {
			return nil, fmt.Errorf("the value podCIDRs: %w", err)
		}
		return cidrs, nil
	}
	return install.NodePodCIDRs(ctx, member)
}

// clusterIDOr is --cluster-id, else the values' clusterID: the ID join
// declares must be the one mcsd runs with.
func (o *joinOptions) clusterIDOr(values map[string]any) string {
	if o.clusterID != "" {
		return o.clusterID
	}
	id, _ := values["clusterID"].(string)
	return id
}

// mcsdObjects are the chart rendered for the member: its cluster ID (as
// join resolves it), pod CIDRs, IP families (its ServiceCIDR's, as mcsd
// detects them, unless the values say; the operator's machine's kernel
// does not matter), image, and the broker's clusterset ranges, over the
// operator's values. An image that cannot exist is refused here, before
// join writes anything.
func (o *joinOptions) mcsdObjects(ctx context.Context, memberCfg *rest.Config, brokerKube kubernetes.Interface, podCIDRs []netip.Prefix, namespace string, values map[string]any, progress func(string, ...any)) ([]*unstructured.Unstructured, error) {
	member, err := status.NewClients(memberCfg)
	if err != nil {
		return nil, err
	}
	id, _, err := membership.ResolveClusterID(ctx, member.Kube, member.Dynamic, o.clusterIDOr(values))
	if err != nil {
		return nil, err
	}
	families, err := valueFamilies(values)
	if err != nil {
		return nil, err
	}
	if len(families) == 0 {
		if families, err = ipfamilies.Served(ctx, member.Kube, func() bool { return true }); err != nil {
			return nil, fmt.Errorf("the member's IP families (or give them: --set ipFamilies={IPv4}): %w", err)
		}
	}
	settings, err := broker.ReadSettings(ctx, brokerKube, o.brokerNamespace)
	if err != nil {
		return nil, err
	}
	image, fromDefault := o.image, false
	if image == "" && install.ImageOf(values) == "" {
		image, fromDefault = install.DefaultImage(), true
	}
	objs, err := install.Objects(install.Settings{
		Namespace:       namespace,
		ClusterID:       id,
		PodCIDRs:        podCIDRs,
		IPFamilies:      families,
		ClusterSetCIDRs: settings.Ranges().CIDRs,
		Image:           image,
		Values:          values,
	})
	if err != nil {
		return nil, err
	}
	for _, img := range install.Images(objs) {
		if err := install.CheckImage(img, fromDefault, version.Get().Version); err != nil {
			return nil, err
		}
		progress("mcsd's image: %s", img)
	}
	return objs, nil
}

// valueFamilies are the IP families the values name, if any.
func valueFamilies(values map[string]any) ([]corev1.IPFamily, error) {
	given, _ := values["ipFamilies"].([]any)
	var out []corev1.IPFamily
	for _, f := range given {
		switch fam := corev1.IPFamily(fmt.Sprint(f)); fam {
		case corev1.IPv4Protocol, corev1.IPv6Protocol:
			out = append(out, fam)
		default:
			return nil, fmt.Errorf("the value ipFamilies: %q is neither %s nor %s", f, corev1.IPv4Protocol, corev1.IPv6Protocol)
		}
	}
	return out, nil
}

// installMCSD puts mcsd's objects in the member, CRDs first, and returns
// what it applies for -o. A dry run applies nothing and returns the CRDs
// the member lacks and the objects.
func (o *joinOptions) installMCSD(ctx context.Context, memberCfg *rest.Config, objs []*unstructured.Unstructured, dry bool, progress func(string, ...any)) ([]runtime.Object, error) {
	var out []runtime.Object
	if dry {
		absent, err := absentCRDs(ctx, memberCfg)
		if err != nil {
			return nil, err
		}
		out = append(out, absent...)
	} else {
		created, err := install.EnsureCRDs(ctx, memberCfg, false)
		if err != nil {
			return nil, err
		}
		for _, name := range created {
			progress("created CRD %s", name)
		}
	}
	for _, obj := range objs {
		out = append(out, obj)
	}
	if dry {
		return out, nil
	}
	client, err := install.NewClient(memberCfg)
	if err != nil {
		return nil, err
	}
	changed, err := client.Apply(ctx, objs)
	if err != nil {
		return nil, fmt.Errorf("installing mcsd in the member (--install=false leaves it to your own tooling): %w", err)
	}
	if len(changed) == 0 {
		progress("mcsd: nothing to change in %d objects", len(objs))
	}
	for _, what := range changed {
		progress("mcsd: applied %s", what)
	}
	return out, nil
}

// absentCRDs are the CRDs the member lacks.
func absentCRDs(ctx context.Context, cfg *rest.Config) ([]runtime.Object, error) {
	ext, err := apiextclient.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	defs, err := install.CRDs()
	if err != nil {
		return nil, err
	}
	var out []runtime.Object
	for _, def := range defs {
		_, err := ext.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, def.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			out = append(out, def)
		} else if err != nil {
			return nil, fmt.Errorf("reading CRD %s: %w", def.Name, err)
		}
	}
	return out, nil
}

// uninstallMCSD removes the mcsd objects join applied in the member, in
// namespace (mcsd's), the namespace last. It keeps the CRDs: deleting them deletes every
// ServiceExport, ServiceImport and ClusterProperty of the cluster, and
// where the cluster is the broker too, every member's records; remove them
// by hand (kubectl delete -k manifests/crds) once no cluster of the
// clusterset uses them.
func uninstallMCSD(ctx context.Context, memberCfg *rest.Config, namespace string, progress func(string, ...any)) error {
	objs, err := install.Shipped(namespace)
	if err != nil {
		return err
	}
	client, err := install.NewClient(memberCfg)
	if err != nil {
		return err
	}
	removed, err := client.Remove(ctx, objs)
	for _, what := range removed {
		progress("mcsd: deleted %s", what)
	}
	if err != nil {
		return fmt.Errorf("removing mcsd from the member: %w", err)
	}
	if len(removed) == 0 {
		progress("mcsd: nothing join installed is left in the member")
	}
	progress("kept the CRDs: deleting them deletes the cluster's ServiceExports, ServiceImports and ClusterProperties, and on the broker every member's records; delete them (kubectl delete -k manifests/crds) once no cluster uses them")
	return nil
}
