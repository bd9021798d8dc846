// Package broker prepares a passive broker: a plain kube-apiserver with the
// mcs-api CRDs where member clusters exchange their records. It installs the
// broker namespace, the roles members get, the broker's settings and the
// admission policies that let each member write only its own records, in
// its own namespace, under its own names, within its byte budget, with VIPs
// inside the clusterset ranges, endpoints inside its declared pod CIDRs and
// services only of namespaces the export rules let it export; it creates
// each member's identity, declaration and namespace (with its
// ResourceQuota), computes the worst case of what members may store, and
// moves the records of a broker of the older, shared layout. Nothing of it
// runs on the broker afterwards.
package broker

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strings"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/mcsd-io/mcsd/internal/record"
	"github.com/mcsd-io/mcsd/manifests"
	"github.com/mcsd-io/mcsd/vipalloc"
)

// DefaultNamespace is the broker namespace the shipped manifests use.
const DefaultNamespace = "mcsd-broker"

// MemberRole is the Role of the broker namespace every member's
// ServiceAccount is bound to; MemberWriterRole the ClusterRole it is bound
// to in its own namespace; MemberReaderRole the ClusterRole every
// ServiceAccount of the broker namespace is bound to everywhere.
const (
	MemberRole       = "mcsd-member"
	MemberWriterRole = "mcsd-broker-member-writer"
	MemberReaderRole = "mcsd-broker-member-reader"
)

// LabelBroker, with the broker namespace as value, marks the broker
// namespace and every member namespace: the admission policies bind only
// namespaces that carry it.
const LabelBroker = "mcsd.io/broker"

// ServiceAccountName is the broker identity of a member cluster; the
// admission policy reads the cluster ID back from it.
func ServiceAccountName(clusterID string) string { return "cluster-" + clusterID }

// Install creates or updates the broker's namespace, member roles,
// settings and admission policies with settings (zero fields take their
// defaults), using config, an administrator's client configuration, and
// brings every member's namespace up to date with them (its ResourceQuota,
// its RoleBinding). It refuses settings whose worst case does not fit the
// broker's etcd (see WorstCase). It returns once the API server enforces
// the policies: it makes dry-run writes as a member identity until the
// policies refuse them (see waitEnforced), so no member write slips through
// a policy still loading, and once the quota controller counts members'
// quotas (see waitQuotaCounts), so that a join right after finds its
// member's quota counted.
func Install(ctx context.Context, config *rest.Config, settings Settings) error {
	settings = settings.WithDefaults()
	objs, err := Objects(settings)
	if err != nil {
		return err
	}
	if err := WorstCase(settings).Fits(); err != nil {
		return err
	}
	kube, err := kubernetes.NewForConfig(config)
	if err != nil {
		return err
	}
	// The shared layout's quota of the broker namespace goes first, so
	// that it holds back none of the writes below: members write nothing
	// there now but their claims, whose names bound them.
	if err := kube.CoreV1().ResourceQuotas(settings.Namespace).Delete(ctx, legacyQuotaName, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting the ResourceQuota %s/%s of the shared layout: %w", settings.Namespace, legacyQuotaName, err)
	}
	for _, obj := range objs {
		if err := apply(ctx, kube, settings, obj); err != nil {
			return err
		}
	}
	members, err := Members(ctx, kube, settings.Namespace)
	if err != nil {
		return err
	}
	for _, id := range members {
		if err := ensureMemberNamespace(ctx, kube, settings, id); err != nil {
			return err
		}
	}
	if err := waitEnforced(ctx, config, settings); err != nil {
		return err
	}
	return waitQuotaCounts(ctx, kube, settings.Namespace)
}

// legacyQuotaName is the ResourceQuota of the broker namespace in the
// shared layout, where every member wrote there.
const legacyQuotaName = "mcsd-broker"

// Objects returns the broker's objects with settings (zero fields are the
// defaults) as Install applies them to a broker without members, in the
// order of the shipped manifests: what an administrator can print and
// apply by other means.
func Objects(settings Settings) ([]runtime.Object, error) {
	settings = settings.WithDefaults()
	if err := settings.validate(); err != nil {
		return nil, err
	}
	var out []runtime.Object
	for _, file := range manifests.BrokerFiles {
		data, err := manifests.Broker.ReadFile(file)
		if err != nil {
			return nil, err
		}
		objs, err := Decode(data)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		for _, obj := range objs {
			if err := render(obj, settings); err != nil {
				return nil, fmt.Errorf("%s: %w", file, err)
			}
			out = append(out, obj)
		}
	}
	return out, nil
}

// render applies settings to one object of the shipped manifests.
func render(obj runtime.Object, settings Settings) error {
	namespace := settings.Namespace
	switch o := obj.(type) {
	case *corev1.Namespace:
		o.Name = namespace
		o.Labels[LabelBroker] = namespace
	case *rbacv1.Role:
		o.Namespace = namespace
	case *rbacv1.ClusterRole:
	case *rbacv1.ClusterRoleBinding:
		// One per broker namespace: its ServiceAccounts read everywhere.
		o.Name = MemberReaderRole + "-" + namespace
		o.Subjects = []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.GroupKind, Name: "system:serviceaccounts:" + namespace}}
	case *corev1.ConfigMap:
		if o.Name != SettingsName {
			return fmt.Errorf("unexpected ConfigMap %s in broker manifests", o.Name)
		}
		o.Namespace = namespace
		o.Data = settings.data()
	case *admissionv1.ValidatingAdmissionPolicy:
	case *admissionv1.ValidatingAdmissionPolicyBinding:
		// Parameters are in the broker namespace; matched objects in the
		// namespaces labelled with it.
		if o.Spec.ParamRef != nil {
			o.Spec.ParamRef.Namespace = namespace
		}
		if o.Spec.MatchResources == nil || o.Spec.MatchResources.NamespaceSelector == nil {
			return fmt.Errorf("binding %s does not select the broker's namespaces", o.Name)
		}
		o.Spec.MatchResources.NamespaceSelector.MatchLabels = map[string]string{LabelBroker: namespace}
	default:
		return fmt.Errorf("unexpected kind %T in broker manifests", obj)
	}
	return nil
}

// Decode reads the objects of a multi-document YAML manifest, such as
// the broker's, with the client-go scheme.
func Decode(data []byte) ([]runtime.Object, error) {
	var objs []runtime.Object
	reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			return objs, nil
		}
		if err != nil {
			return nil, err
		}
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(doc, nil, nil)
		if err != nil {
			return nil, err
		}
		objs = append(objs, obj)
	}
}

func apply(ctx context.Context, kube kubernetes.Interface, settings Settings, obj runtime.Object) error {
	namespace := settings.Namespace
	switch o := obj.(type) {
	case *corev1.Namespace:
		return upsert(ctx, kube.CoreV1().Namespaces(), o, func(cur, want *corev1.Namespace) { cur.Labels = want.Labels })
	case *rbacv1.Role:
		return upsert(ctx, kube.RbacV1().Roles(namespace), o, func(cur, want *rbacv1.Role) { cur.Rules = want.Rules })
	case *rbacv1.ClusterRole:
		return upsert(ctx, kube.RbacV1().ClusterRoles(), o, func(cur, want *rbacv1.ClusterRole) { cur.Labels, cur.Rules = want.Labels, want.Rules })
	case *rbacv1.ClusterRoleBinding:
		return applyClusterRoleBinding(ctx, kube, o)
	case *corev1.ConfigMap:
		return upsert(ctx, kube.CoreV1().ConfigMaps(namespace), o, setData)
	case *admissionv1.ValidatingAdmissionPolicy:
		return upsert(ctx, kube.AdmissionregistrationV1().ValidatingAdmissionPolicies(), o,
			func(cur, want *admissionv1.ValidatingAdmissionPolicy) { cur.Spec = want.Spec })
	case *admissionv1.ValidatingAdmissionPolicyBinding:
		return upsert(ctx, kube.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings(), o,
			func(cur, want *admissionv1.ValidatingAdmissionPolicyBinding) { cur.Spec = want.Spec })
	default:
		return fmt.Errorf("unexpected kind %T in broker manifests", obj)
	}
}

// typedClient is a client of one kind of object, as client-go's typed
// clients are.
type typedClient[T any] interface {
	Create(ctx context.Context, obj T, opts metav1.CreateOptions) (T, error)
	Get(ctx context.Context, name string, opts metav1.GetOptions) (T, error)
	Update(ctx context.Context, obj T, opts metav1.UpdateOptions) (T, error)
}

// upsert creates want, or, when it exists, updates the object the API
// server has with what set copies from want (the fields the broker owns),
// reading it again when another writer raced the update.
func upsert[T metav1.Object](ctx context.Context, client typedClient[T], want T, set func(cur, want T)) error {
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		_, err := client.Create(ctx, want, metav1.CreateOptions{})
		if !apierrors.IsAlreadyExists(err) {
			return err
		}
		cur, err := client.Get(ctx, want.GetName(), metav1.GetOptions{})
		if err != nil {
			return err
		}
		set(cur, want)
		_, err = client.Update(ctx, cur, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("applying %s: %w", want.GetName(), err)
	}
	return nil
}

// setData copies a ConfigMap's labels and data, for upsert.
func setData(cur, want *corev1.ConfigMap) { cur.Labels, cur.Data = want.Labels, want.Data }

// applyClusterRoleBinding creates or updates b. The role of a binding
// cannot change: one of another role goes first.
func applyClusterRoleBinding(ctx context.Context, kube kubernetes.Interface, b *rbacv1.ClusterRoleBinding) error {
	bindings := kube.RbacV1().ClusterRoleBindings()
	if cur, err := bindings.Get(ctx, b.Name, metav1.GetOptions{}); err == nil && cur.RoleRef != b.RoleRef {
		if err := bindings.Delete(ctx, b.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("replacing ClusterRoleBinding %s of another role: %w", b.Name, err)
		}
	}
	return upsert(ctx, bindings, b, func(cur, want *rbacv1.ClusterRoleBinding) { cur.Labels, cur.Subjects = want.Labels, want.Subjects })
}

// The broker's admission policies (and their bindings, of the same names).
// A refusal by one of them says "ValidatingAdmissionPolicy '<name>'".
const (
	// SourceClusterPolicy binds members to their own namespace, labels,
	// names, claims and VIPs, with the settings as its parameter.
	SourceClusterPolicy = "mcsd-broker-source-cluster"
	// BudgetPolicy bounds the size of what members write, with the
	// settings as its parameter.
	BudgetPolicy = "mcsd-broker-member-budget"
	// EndpointsPolicy binds members' endpoints to their declared pod CIDRs,
	// with the declarations as its parameters.
	EndpointsPolicy = "mcsd-broker-member-endpoints"
	// ExportRulesPolicy lets members export only the namespaces the export
	// rules give them, with the rules as its parameters.
	ExportRulesPolicy = "mcsd-broker-export-rules"
)

// probeCluster is the member identity Install's probes write as; they are
// dry runs, so a real member of that name is not disturbed. Its namespace
// exists so that a probe can be well placed, and is bound to nobody.
const probeCluster = "mcsd-install-probe"

// ensureProbeNamespace creates the probe identity's member namespace.
func ensureProbeNamespace(ctx context.Context, kube kubernetes.Interface, namespace string) error {
	ns := memberNamespaceObject(namespace, probeCluster)
	_, err := kube.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating the namespace %s of the broker's admission probes: %w", ns.Name, err)
	}
	return nil
}

// impersonate returns a configuration of config that acts as member
// cluster's identity of the broker namespace, with group system:masters so
// that RBAC allows everything and only the admission policies decide.
func impersonate(config *rest.Config, namespace, cluster string) *rest.Config {
	cfg := rest.CopyConfig(config)
	cfg.Impersonate = rest.ImpersonationConfig{
		UserName: "system:serviceaccount:" + namespace + ":" + ServiceAccountName(cluster),
		Groups:   []string{"system:masters", "system:serviceaccounts", "system:serviceaccounts:" + namespace, "system:authenticated"},
	}
	return cfg
}

// probe is a dry-run write that an admission policy must refuse, saying
// want.
type probe struct {
	policy, want string
	write        func(context.Context) error
}

// waitRefused returns once every probe is refused as it expects. The API
// server loads a new policy (and its parameters) asynchronously: until then
// a member's forbidden write goes through. With an API server of several
// instances, each loads the policies on its own: this checks the one that
// answers.
func waitRefused(ctx context.Context, namespace string, probes []probe) error {
	for _, p := range probes {
		var last error
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
			last = p.write(ctx)
			return last != nil && strings.Contains(last.Error(), p.want), nil
		})
		if err != nil {
			return fmt.Errorf("the broker's admission policy %s is not enforced in namespace %s: a member's forbidden write %s (is the ValidatingAdmissionPolicy API enabled?): %w",
				p.policy, namespace, outcome(last), err)
		}
	}
	return nil
}

// waitEnforced returns once the API server enforces the admission policies
// that refuse writes whatever the parameters are, for member writes in the
// broker's namespaces. Each probe is a dry-run write, made as the member
// identity of probeCluster, that breaks exactly one policy's rule.
func waitEnforced(ctx context.Context, config *rest.Config, settings Settings) error {
	namespace := settings.Namespace
	admin, err := kubernetes.NewForConfig(config)
	if err != nil {
		return err
	}
	if err := ensureProbeNamespace(ctx, admin, namespace); err != nil {
		return err
	}
	kube, err := kubernetes.NewForConfig(impersonate(config, namespace, probeCluster))
	if err != nil {
		return err
	}
	dryRun := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	labels := map[string]string{mcsv1beta1.LabelSourceCluster: probeCluster}
	own := record.MemberNamespace(namespace, probeCluster)
	block := netip.PrefixFrom(settings.ClusterSetCIDRv4.Addr(), settings.BlockBitsV4)
	probes := []probe{{
		// A ConfigMap that is not a ClusterSetIP claim.
		policy: SourceClusterPolicy,
		want:   "cluster " + probeCluster + " may only write configmaps named",
		write: func(ctx context.Context) error {
			_, err := kube.CoreV1().ConfigMaps(namespace).Create(ctx, &corev1.ConfigMap{
				ObjectMeta: metav1.ObjectMeta{Name: "mcsd-install-probe", Namespace: namespace, Labels: labels},
			}, dryRun)
			return err
		},
	}, {
		// A well-formed claim with a finalizer.
		policy: BudgetPolicy,
		want:   BudgetPolicy,
		write: func(ctx context.Context) error {
			_, err := kube.CoreV1().ConfigMaps(namespace).Create(ctx, &corev1.ConfigMap{
				ObjectMeta: metav1.ObjectMeta{
					Name: vipalloc.ClaimName(probeCluster, corev1.IPv4Protocol), Namespace: namespace,
					Labels:     map[string]string{vipalloc.LabelClaim: "", mcsv1beta1.LabelSourceCluster: probeCluster},
					Finalizers: []string{"mcsd.io/probe"},
				},
				Data: map[string]string{vipalloc.ClaimKey: block.Masked().String()},
			}, dryRun)
			return err
		},
	}, {
		// A well-named slice in its own namespace with an endpoint of two
		// addresses; refused whatever the declarations (or, with none, for
		// lack of one).
		policy: EndpointsPolicy,
		want:   EndpointsPolicy,
		write: func(ctx context.Context) error {
			_, err := kube.DiscoveryV1().EndpointSlices(own).Create(ctx, &discoveryv1.EndpointSlice{
				ObjectMeta: metav1.ObjectMeta{
					Name: record.EndpointSliceName(probeCluster, "probe", "probe", discoveryv1.AddressTypeIPv4, 0), Namespace: own,
					Labels: record.EndpointSliceLabels(probeCluster, "probe", "probe"),
				},
				AddressType: discoveryv1.AddressTypeIPv4,
				Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"192.0.2.1", "192.0.2.2"}}},
			}, dryRun)
			return err
		},
	}}
	return waitRefused(ctx, namespace, probes)
}

func outcome(err error) string {
	if err == nil {
		return "was accepted"
	}
	return "was refused for another reason: " + err.Error()
}
