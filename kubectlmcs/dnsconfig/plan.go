package dnsconfig

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/mcsd-io/mcsd/internal/corefile"
)

// Join plans what the member's DNS needs to forward the zones of block (a
// server block, ServerBlock) to target, the mcsd-dns address: the block
// in CoreDNS's Corefile, or in coredns-custom where the Corefile imports
// server blocks from it; in NodeLocal DNSCache's Corefile, a block of
// the clusterset zone forwarding as its cluster domain does (to the
// cluster DNS, which holds the reverse zones too); with kube-dns, its stub
// domains, by hand. Nothing already in place is changed again.
func Join(ctx context.Context, kube kubernetes.Interface, block, target string) (Plan, error) {
	return plan(ctx, kube, &joining{block: block, target: target})
}

// Leave plans taking back what Join adds: the clusterset zone's server
// block, mcsd's key of coredns-custom, kube-dns's stub domains of the
// zones of block.
func Leave(ctx context.Context, kube kubernetes.Interface, block string) (Plan, error) {
	return plan(ctx, kube, &joining{block: block, leave: true})
}

// joining is what Join or Leave does to each kind of DNS.
type joining struct {
	block, target string
	leave         bool
}

func plan(ctx context.Context, kube kubernetes.Interface, j *joining) (Plan, error) {
	var p Plan
	r := reader{kube}
	coredns, err := r.configMap(ctx, CoreDNS)
	if err != nil {
		return p, err
	}
	if coredns != nil {
		p.Found = append(p.Found, "CoreDNS ("+metav1.NamespaceSystem+"/"+CoreDNS+")")
		changes, err := j.coreDNS(ctx, r, coredns)
		if err != nil {
			return p, err
		}
		p.Changes = append(p.Changes, changes...)
	}
	nodeLocal, err := r.configMap(ctx, NodeLocalDNS)
	if err != nil {
		return p, err
	}
	if nodeLocal != nil {
		p.Found = append(p.Found, "NodeLocal DNSCache ("+metav1.NamespaceSystem+"/"+NodeLocalDNS+")")
		change, err := j.nodeLocal(nodeLocal)
		if err != nil {
			return p, err
		}
		p.Changes = append(p.Changes, change...)
	} else if ds, err := r.exists(ctx, "DaemonSet", NodeLocalDNS); err != nil {
		return p, err
	} else if ds && !j.leave {
		p.Found = append(p.Found, "NodeLocal DNSCache (DaemonSet "+metav1.NamespaceSystem+"/"+NodeLocalDNS+")")
		p.Changes = append(p.Changes, Change{
			What:   fmt.Sprintf("forward %s to the cluster DNS in NodeLocal DNSCache's configuration, as its cluster domain is", zone),
			Manual: fmt.Sprintf("the DaemonSet %s/%s runs without the ConfigMap %s this knows", metav1.NamespaceSystem, NodeLocalDNS, NodeLocalDNS),
		})
	}
	if coredns != nil {
		return p, nil
	}
	kubeDNS, err := r.configMap(ctx, KubeDNS)
	if err != nil {
		return p, err
	}
	deployed, err := r.exists(ctx, "Deployment", KubeDNS)
	if err != nil {
		return p, err
	}
	if kubeDNS == nil && !deployed {
		if !j.leave {
			p.Changes = append(p.Changes, Change{
				What:   fmt.Sprintf("forward the zones of this server block to %s in the cluster's DNS:\n%s", j.target, j.block),
				Manual: fmt.Sprintf("no cluster DNS found in %s: neither CoreDNS (ConfigMap %s) nor kube-dns (ConfigMap or Deployment %s)", metav1.NamespaceSystem, CoreDNS, KubeDNS),
			})
		}
		return p, nil
	}
	p.Found = append(p.Found, "kube-dns ("+metav1.NamespaceSystem+"/"+KubeDNS+")")
	change, err := j.kubeDNS(kubeDNS)
	if err != nil {
		return p, err
	}
	p.Changes = append(p.Changes, change...)
	return p, nil
}

// coreDNS plans CoreDNS's change: in coredns-custom where the Corefile
// imports server blocks, else in the Corefile.
func (j *joining) coreDNS(ctx context.Context, r reader, coredns *corev1.ConfigMap) ([]Change, error) {
	cf := coredns.Data[CorefileKey]
	imports, err := importsServerBlocks(cf)
	if err != nil {
		return nil, fmt.Errorf("ConfigMap %s/%s: %w", coredns.Namespace, coredns.Name, err)
	}
	var changes []Change
	custom, err := r.configMap(ctx, CoreDNSCustom)
	if err != nil {
		return nil, err
	}
	// Leave takes back both places, should the Corefile have changed
	// since.
	if imports || (j.leave && custom != nil) {
		var after *corev1.ConfigMap
		have, has := "", false
		if custom != nil {
			have, has = custom.Data[CustomKey]
		}
		switch {
		case j.leave && has:
			after = withData(custom, CoreDNSCustom, CustomKey, nil)
		case !j.leave && (!has || have != j.block):
			after = withData(custom, CoreDNSCustom, CustomKey, &j.block)
		}
		if after != nil {
			changes = append(changes, Change{Before: custom, After: after, Manual: reconciled(custom),
				What: j.verb() + fmt.Sprintf(" the key %s of ConfigMap %s/%s, whose server blocks the Corefile imports", CustomKey, metav1.NamespaceSystem, CoreDNSCustom)})
		}
		if !j.leave {
			return changes, nil
		}
	}
	var edited string
	if j.leave {
		edited, _, err = corefile.Remove(cf, zone)
	} else {
		edited, err = corefile.Set(cf, zone, j.block)
	}
	if err != nil {
		return nil, fmt.Errorf("the Corefile of ConfigMap %s/%s: %w", coredns.Namespace, coredns.Name, err)
	}
	if edited != cf {
		changes = append(changes, Change{Before: coredns, After: withData(coredns, CoreDNS, CorefileKey, &edited), Manual: reconciled(coredns),
			What: j.verb() + fmt.Sprintf(" the server block of %s in the Corefile of ConfigMap %s/%s", zone, coredns.Namespace, coredns.Name)})
	}
	return changes, nil
}

// nodeLocal plans NodeLocal DNSCache's change: a server block of the
// clusterset zone made from that of its cluster domain.
func (j *joining) nodeLocal(cm *corev1.ConfigMap) ([]Change, error) {
	cf := cm.Data[CorefileKey]
	var edited string
	var err error
	if j.leave {
		edited, _, err = corefile.Remove(cf, zone)
	} else {
		domain, ok, derr := corefile.ClusterDomain(cf)
		if derr != nil || !ok {
			return nil, fmt.Errorf("the Corefile of ConfigMap %s/%s has no server block of the cluster domain to forward %s as it does (%v)", cm.Namespace, cm.Name, zone, derr)
		}
		var block string
		if block, err = corefile.Derive(cf, domain, zone); err == nil {
			edited, err = corefile.Set(cf, zone, block)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("the Corefile of ConfigMap %s/%s: %w", cm.Namespace, cm.Name, err)
	}
	if edited == cf {
		return nil, nil
	}
	return []Change{{Before: cm, After: withData(cm, NodeLocalDNS, CorefileKey, &edited), Manual: reconciled(cm),
		What: j.verb() + fmt.Sprintf(" the server block of %s in the Corefile of ConfigMap %s/%s (NodeLocal DNSCache)", zone, cm.Namespace, cm.Name)}}, nil
}

// kubeDNS plans kube-dns's stub domains for the zones of the block: made
// by hand, as the platforms that run kube-dns own its configuration.
func (j *joining) kubeDNS(cm *corev1.ConfigMap) ([]Change, error) {
	zones, err := zonesOf(j.block)
	if err != nil {
		return nil, err
	}
	stubs := map[string][]string{}
	if cm != nil && cm.Data[StubDomainsKey] != "" {
		if err := json.Unmarshal([]byte(cm.Data[StubDomainsKey]), &stubs); err != nil {
			return nil, fmt.Errorf("ConfigMap %s/%s: %s is not JSON: %w", cm.Namespace, cm.Name, StubDomainsKey, err)
		}
	}
	want := maps.Clone(stubs)
	for _, z := range zones {
		if j.leave {
			delete(want, z)
		} else {
			want[z] = []string{j.target}
		}
	}
	if maps.EqualFunc(stubs, want, slices.Equal) {
		return nil, nil
	}
	data, err := json.Marshal(want)
	if err != nil {
		return nil, err
	}
	value := string(data)
	return []Change{{Before: cm, After: withData(cm, KubeDNS, StubDomainsKey, &value),
		What:   j.verb() + fmt.Sprintf(" the stub domains of %s in ConfigMap %s/%s", zones, metav1.NamespaceSystem, KubeDNS),
		Manual: "the cluster DNS is kube-dns, whose configuration its platform owns: apply this ConfigMap (kubectl apply -f) if yours lets you"}}, nil
}

func (j *joining) verb() string {
	if j.leave {
		return "remove"
	}
	return "set"
}
