package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/netip"
	"strings"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/mcsd-io/mcsd/broker"
	"github.com/mcsd-io/mcsd/kubectlmcs/dnsconfig"
)

// The member's DNS Service, in mcsd's namespace, which the cluster DNS
// forwards the clusterset zone to.
const mcsdDNSService = "mcsd-dns"

// dnsFlag is --dns: whether join and leave change the cluster DNS.
type dnsFlag struct{ mode string }

const (
	dnsAuto = "auto"
	dnsSkip = "skip"
)

func (d *dnsFlag) add(cmd *cobra.Command, what string) {
	cmd.Flags().StringVar(&d.mode, "dns", dnsAuto, what+": "+dnsAuto+" (CoreDNS, coredns-custom and NodeLocal DNSCache are changed; where the platform reconciles the Corefile or the DNS is kube-dns, the change is printed and the command fails) or "+dnsSkip)
}

func (d *dnsFlag) validate() error {
	if d.mode != dnsAuto && d.mode != dnsSkip {
		return fmt.Errorf("--dns %q: want %s or %s", d.mode, dnsAuto, dnsSkip)
	}
	return nil
}

// memberDNS plans the member's DNS change for join (or leave), and applies
// what it may unless dry. The block forwards to the ClusterIP of mcsd-dns,
// in mcsd's namespace, the clusterset zone and the reverse zones of the
// broker's ranges. Without mcsd-dns, join has nothing to forward to and
// plans nothing.
func memberDNS(ctx context.Context, member, brokerKube kubernetes.Interface, brokerNamespace, mcsdNamespace string, leave, dry bool, progress func(string, ...any)) (dnsconfig.Plan, error) {
	target := ""
	svc, err := member.CoreV1().Services(mcsdNamespace).Get(ctx, mcsdDNSService, metav1.GetOptions{})
	switch {
	case err == nil:
		target = svc.Spec.ClusterIP
	case !apierrors.IsNotFound(err):
		return dnsconfig.Plan{}, fmt.Errorf("reading Service %s/%s in the member: %w", mcsdNamespace, mcsdDNSService, err)
	case !leave:
		progress("DNS: no Service %s/%s in the member yet, nothing to forward clusterset.local to: install mcsd (in --namespace), then join again, or join with --wait, which waits for it", mcsdNamespace, mcsdDNSService)
		return dnsconfig.Plan{}, nil
	}
	var ranges []netip.Prefix
	if settings, err := broker.ReadSettings(ctx, brokerKube, brokerNamespace); err != nil {
		progress("DNS: %v; the reverse zones of the default clusterset ranges are forwarded", err)
	} else {
		ranges = settings.Ranges().CIDRs
	}
	block, err := dnsconfig.ServerBlock(target, ranges)
	if err != nil {
		return dnsconfig.Plan{}, err
	}
	var plan dnsconfig.Plan
	if leave {
		plan, err = dnsconfig.Leave(ctx, member, block)
	} else {
		plan, err = dnsconfig.Join(ctx, member, block, target)
	}
	if err != nil {
		return plan, err
	}
	if len(plan.Found) > 0 {
		progress("DNS: found %s", strings.Join(plan.Found, ", "))
	}
	if len(plan.Changes) == 0 {
		progress("DNS: nothing to change")
	}
	if dry {
		return plan, nil
	}
	applied, err := dnsconfig.Apply(ctx, member, plan)
	for _, what := range applied {
		progress("DNS: did %s", what)
	}
	return plan, err
}

// manualDNS prints the changes of plan to make by hand, as comments and
// the ConfigMaps to apply, and returns an error saying so when there are
// some. What has no ConfigMap to apply (no cluster DNS found) is a
// warning on errOut: there is nothing join could have changed.
func manualDNS(out, errOut io.Writer, plan dnsconfig.Plan, command string) error {
	n := 0
	for _, c := range plan.Manual() {
		if c.After == nil {
			fmt.Fprintf(errOut, "warning: %s; %s\n", c.Manual, c.What)
			continue
		}
		n++
		fmt.Fprintf(out, "%s\n%s\n", comment("By hand: "+c.Manual+"."), comment("The change: "+c.What))
		data, err := yaml.Marshal(printable(c.After))
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "%s---\n", data)
	}
	if n > 0 {
		return fmt.Errorf("the cluster DNS needs %d change(s) made by hand, printed above; make them, then run %s again with --dns=%s", n, command, dnsSkip)
	}
	return nil
}

func comment(s string) string {
	return "# " + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n# ")
}

// printable is obj as kubectl apply takes it: with its kind, without
// what the API server keeps.
func printable(obj runtime.Object) runtime.Object {
	obj = obj.DeepCopyObject()
	if m, err := meta.Accessor(obj); err == nil {
		m.SetResourceVersion("")
		m.SetUID("")
		m.SetManagedFields(nil)
		m.SetCreationTimestamp(metav1.Time{})
	}
	switch o := obj.(type) {
	case *corev1.ConfigMap:
		o.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"}
	case *corev1.Secret:
		o.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"}
	}
	return obj
}

// printObjects writes objs as a YAML stream or a JSON List.
func printObjects(w io.Writer, format string, objs []runtime.Object) error {
	if format == "json" {
		items := make([]json.RawMessage, 0, len(objs))
		for _, obj := range objs {
			data, err := json.Marshal(printable(obj))
			if err != nil {
				return err
			}
			items = append(items, data)
		}
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(map[string]any{"apiVersion": "v1", "kind": "List", "items": items})
	}
	for i, obj := range objs {
		data, err := yaml.Marshal(printable(obj))
		if err != nil {
			return err
		}
		if i > 0 {
			fmt.Fprintln(w, "---")
		}
		fmt.Fprintf(w, "%s", data)
	}
	return nil
}
