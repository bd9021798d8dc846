package main

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
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
	namespace, clusterSetCIDRs, budget string
	blockV4, blockV6                   int
	skipCRDs, print                    bool
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
	return s.WithDefaults(), nil
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

// printBroker writes the broker's manifests with settings applied, as
// broker.Install would apply them to a broker without members.
func printBroker(w io.Writer, s broker.Settings, withCRDs bool) error {
	var docs [][]byte
	if withCRDs {
		docs = append(docs, crdDocs()...)
	}
	objs, err := broker.Objects(s)
	if err != nil {
		return err
	}
	for _, obj := range objs {
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
