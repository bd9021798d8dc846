package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/mcs-api/config/crd"
	"sigs.k8s.io/yaml"

	"github.com/mcsd-io/mcsd/broker"
	"github.com/mcsd-io/mcsd/clustersetip"
	"github.com/mcsd-io/mcsd/manifests"
)

func newBrokerCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "broker",
		Short: "Set up the broker",
	}
	cmd.AddCommand(newBrokerInstallCmd(g))
	return cmd
}

type brokerInstallOptions struct {
	namespace        string
	clusterSetCIDRs  string
	blockV4, blockV6 int
	budget           string
	skipCRDs         bool
	print            bool
}

func newBrokerInstallCmd(g *globals) *cobra.Command {
	o := &brokerInstallOptions{}
	cmd := &cobra.Command{
		Use:   "install",
		Short: "Install the broker: CRDs, namespace, member Role, settings, quota and admission policies",
		Long: `Install the broker in the cluster of --broker-context (else --context), with
broker.Install, and return once its API server enforces the admission
policies that bind each member to its own records. --print writes the
manifests, with these settings, instead of applying them.`,
		Example: `  kubectl mcs broker install --broker-context BROKER
  kubectl mcs broker install --clusterset-cidrs 10.250.0.0/16,fd00:250::/48 --block-bits-ipv4 24 --print`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			settings, err := o.settings()
			if err != nil {
				return err
			}
			if o.print {
				return printBroker(g.streams.Out, settings, !o.skipCRDs)
			}
			cfg, err := g.brokerConfig()
			if err == nil && cfg == nil {
				cfg, err = g.memberConfig("")
			}
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), 5*time.Minute)
			defer cancel()
			if !o.skipCRDs {
				fmt.Fprintf(g.streams.ErrOut, "installing the CRDs at %s\n", cfg.Host)
				if err := installCRDs(ctx, cfg); err != nil {
					return err
				}
			}
			fmt.Fprintf(g.streams.ErrOut, "installing the broker in namespace %s and waiting for its admission policies to be enforced\n", settings.Namespace)
			if err := broker.Install(ctx, cfg, settings); err != nil {
				return err
			}
			fmt.Fprintf(g.streams.Out, "broker installed at %s in namespace %s\n", cfg.Host, settings.Namespace)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.namespace, "broker-namespace", broker.DefaultNamespace, "the broker namespace")
	f.StringVar(&o.clusterSetCIDRs, "clusterset-cidrs", "", "the clusterset VIP ranges, one per IP family (default "+clustersetip.DefaultClusterSetCIDRv4.String()+","+clustersetip.DefaultClusterSetCIDRv6.String()+"); as mcsd's --clusterset-cidrs on every member")
	f.IntVar(&o.blockV4, "block-bits-ipv4", 0, fmt.Sprintf("prefix length of each member's IPv4 ClusterSetIP block (default %d)", clustersetip.DefaultBlockBitsV4))
	f.IntVar(&o.blockV6, "block-bits-ipv6", 0, fmt.Sprintf("prefix length of each member's IPv6 ClusterSetIP block (default %d)", clustersetip.DefaultBlockBitsV6))
	f.StringVar(&o.budget, "member-budget", "", "per-member object budget SERVICEIMPORTS,ENDPOINTSLICES,CONFIGMAPS,LEASES (default "+budgetString(broker.DefaultMemberBudget)+")")
	f.BoolVar(&o.skipCRDs, "skip-crds", false, "do not install the mcs-api and ClusterProperty CRDs")
	f.BoolVar(&o.print, "print", false, "print the manifests instead of applying them")
	return cmd
}

func budgetString(b broker.Budget) string {
	return fmt.Sprintf("%d,%d,%d,%d", b.ServiceImports, b.EndpointSlices, b.ConfigMaps, b.Leases)
}

func (o *brokerInstallOptions) settings() (broker.Settings, error) {
	s := broker.Settings{Namespace: o.namespace, BlockBitsV4: o.blockV4, BlockBitsV6: o.blockV6}
	if o.clusterSetCIDRs != "" {
		for _, c := range strings.Split(o.clusterSetCIDRs, ",") {
			p, err := netip.ParsePrefix(strings.TrimSpace(c))
			if err != nil {
				return s, fmt.Errorf("--clusterset-cidrs: %w", err)
			}
			if p.Addr().Is4() {
				s.ClusterSetCIDRv4 = p.Masked()
			} else {
				s.ClusterSetCIDRv6 = p.Masked()
			}
		}
	}
	if o.budget != "" {
		parts := strings.Split(o.budget, ",")
		if len(parts) != 4 {
			return s, fmt.Errorf("--member-budget %q: want four numbers", o.budget)
		}
		var n [4]int
		for i, p := range parts {
			v, err := strconv.Atoi(strings.TrimSpace(p))
			if err != nil || v < 0 {
				return s, fmt.Errorf("--member-budget %q: %q is not a count", o.budget, p)
			}
			n[i] = v
		}
		s.MemberBudget = broker.Budget{ServiceImports: n[0], EndpointSlices: n[1], ConfigMaps: n[2], Leases: n[3]}
	}
	return withDefaults(s), nil
}

// withDefaults fills the zero fields of s with broker's defaults, as
// broker.Install does, so that --print shows what Install applies.
func withDefaults(s broker.Settings) broker.Settings {
	if s.Namespace == "" {
		s.Namespace = broker.DefaultNamespace
	}
	if !s.ClusterSetCIDRv4.IsValid() {
		s.ClusterSetCIDRv4 = clustersetip.DefaultClusterSetCIDRv4
	}
	if !s.ClusterSetCIDRv6.IsValid() {
		s.ClusterSetCIDRv6 = clustersetip.DefaultClusterSetCIDRv6
	}
	if s.BlockBitsV4 == 0 {
		s.BlockBitsV4 = clustersetip.DefaultBlockBitsV4
	}
	if s.BlockBitsV6 == 0 {
		s.BlockBitsV6 = clustersetip.DefaultBlockBitsV6
	}
	if s.MemberBudget == (broker.Budget{}) {
		s.MemberBudget = broker.DefaultMemberBudget
	}
	return s
}

// crdDocs are the CRDs a broker and every member need.
func crdDocs() [][]byte {
	return [][]byte{crd.ServiceExportCRD, crd.ServiceImportCRD, manifests.ClusterPropertyCRD}
}

// installCRDs creates or updates the CRDs and waits until they are
// Established.
func installCRDs(ctx context.Context, cfg *rest.Config) error {
	ext, err := apiextclient.NewForConfig(cfg)
	if err != nil {
		return err
	}
	crds := ext.ApiextensionsV1().CustomResourceDefinitions()
	for _, doc := range crdDocs() {
		var def apiextv1.CustomResourceDefinition
		if err := yaml.Unmarshal(doc, &def); err != nil {
			return fmt.Errorf("decoding CRD: %w", err)
		}
		_, err := crds.Create(ctx, &def, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			var cur *apiextv1.CustomResourceDefinition
			if cur, err = crds.Get(ctx, def.Name, metav1.GetOptions{}); err == nil {
				cur.Spec = def.Spec
				_, err = crds.Update(ctx, cur, metav1.UpdateOptions{})
			}
		}
		if err != nil {
			return fmt.Errorf("installing CRD %s: %w", def.Name, err)
		}
		err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			cur, err := crds.Get(ctx, def.Name, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			for _, c := range cur.Status.Conditions {
				if c.Type == apiextv1.Established && c.Status == apiextv1.ConditionTrue {
					return true, nil
				}
			}
			return false, nil
		})
		if err != nil {
			return fmt.Errorf("CRD %s never became Established: %w", def.Name, err)
		}
	}
	return nil
}

// Keys of the settings ConfigMap, as broker.ParseSettings reads them.
var settingKeys = struct{ v4, v6, bits4, bits6, si, eps, cm, leases string }{
	"clusterSetCIDRv4", "clusterSetCIDRv6", "blockBitsV4", "blockBitsV6",
	"memberServiceImports", "memberEndpointSlices", "memberConfigMaps", "memberLeases",
}

// printBroker writes the broker's manifests with settings applied, as
// broker.Install would apply them to a broker without members.
func printBroker(w io.Writer, s broker.Settings, withCRDs bool) error {
	var docs [][]byte
	if withCRDs {
		docs = append(docs, crdDocs()...)
	}
	for _, file := range manifests.BrokerFiles {
		data, err := manifests.Broker.ReadFile(file)
		if err != nil {
			return err
		}
		objs, err := decodeAll(data)
		if err != nil {
			return fmt.Errorf("%s: %w", file, err)
		}
		for _, obj := range objs {
			if err := setBroker(obj, s); err != nil {
				return fmt.Errorf("%s: %w", file, err)
			}
			gvks, _, err := scheme.Scheme.ObjectKinds(obj)
			if err != nil {
				return err
			}
			obj.GetObjectKind().SetGroupVersionKind(gvks[0])
			out, err := yaml.Marshal(obj)
			if err != nil {
				return err
			}
			docs = append(docs, out)
		}
	}
	for i, d := range docs {
		if i > 0 {
			if _, err := io.WriteString(w, "---\n"); err != nil {
				return err
			}
		}
		if _, err := w.Write(d); err != nil {
			return err
		}
	}
	return nil
}

func decodeAll(data []byte) ([]runtime.Object, error) {
	var objs []runtime.Object
	r := utilyaml.NewYAMLReader(bufioReader(data))
	for {
		doc, err := r.Read()
		if err == io.EOF {
			return objs, nil
		}
		if err != nil {
			return nil, err
		}
		if len(strings.TrimSpace(string(doc))) == 0 {
			continue
		}
		obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(doc, nil, nil)
		if err != nil {
			return nil, err
		}
		objs = append(objs, obj)
	}
}

// setBroker applies the settings to one object of the broker's manifests.
func setBroker(obj runtime.Object, s broker.Settings) error {
	ns := s.Namespace
	switch o := obj.(type) {
	case *corev1.Namespace:
		o.Name = ns
	case *rbacv1.Role:
		o.Namespace = ns
	case *corev1.ConfigMap:
		o.Namespace = ns
		b := s.MemberBudget
		o.Data = map[string]string{
			settingKeys.v4: s.ClusterSetCIDRv4.String(), settingKeys.v6: s.ClusterSetCIDRv6.String(),
			settingKeys.bits4: strconv.Itoa(s.BlockBitsV4), settingKeys.bits6: strconv.Itoa(s.BlockBitsV6),
			settingKeys.si: strconv.Itoa(b.ServiceImports), settingKeys.eps: strconv.Itoa(b.EndpointSlices),
			settingKeys.cm: strconv.Itoa(b.ConfigMaps), settingKeys.leases: strconv.Itoa(b.Leases),
		}
	case *corev1.ResourceQuota:
		// One spare budget and the namespace's own two ConfigMaps; joins
		// raise it.
		o.Namespace = ns
		b := s.MemberBudget
		q := func(n int) resource.Quantity { return *resource.NewQuantity(int64(n), resource.DecimalSI) }
		o.Spec.Hard = corev1.ResourceList{
			"count/serviceimports.multicluster.x-k8s.io": q(b.ServiceImports),
			"count/endpointslices.discovery.k8s.io":      q(b.EndpointSlices),
			"count/configmaps":                           q(b.ConfigMaps + 2),
			"count/leases.coordination.k8s.io":           q(b.Leases),
		}
	case *admissionv1.ValidatingAdmissionPolicy:
	case *admissionv1.ValidatingAdmissionPolicyBinding:
		if o.Spec.ParamRef != nil {
			o.Spec.ParamRef.Namespace = ns
		}
		if o.Spec.MatchResources == nil || o.Spec.MatchResources.NamespaceSelector == nil {
			return fmt.Errorf("binding %s does not select the broker namespace", o.Name)
		}
		o.Spec.MatchResources.NamespaceSelector.MatchLabels = map[string]string{corev1.LabelMetadataName: ns}
	default:
		return fmt.Errorf("unexpected kind %T in the broker's manifests", obj)
	}
	return nil
}

func bufioReader(data []byte) *bufio.Reader { return bufio.NewReader(bytes.NewReader(data)) }
