// Package broker prepares a passive broker: a plain kube-apiserver with the
// mcs-api CRDs where member clusters exchange their records. It installs the
// broker namespace, the Role members get, the broker's settings and
// ResourceQuota, and the admission policies that let each member write only
// its own records, under its own names, with VIPs inside the clusterset
// ranges and endpoints inside its declared pod CIDRs; and it creates each
// member's identity and declaration. Nothing of it runs on the broker
// afterwards.
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

	"github.com/mcsd-io/mcsd/clusterid"
	"github.com/mcsd-io/mcsd/internal/record"
	"github.com/mcsd-io/mcsd/manifests"
)

// DefaultNamespace is the broker namespace the shipped manifests use.
const DefaultNamespace = "mcsd-broker"

// MemberRole is the Role every member's ServiceAccount is bound to.
const MemberRole = "mcsd-member"

// ServiceAccountName is the broker identity of a member cluster; the
// admission policy reads the cluster ID back from it.
func ServiceAccountName(clusterID string) string { return "cluster-" + clusterID }

// Install creates or updates the broker's namespace, member Role, settings,
// ResourceQuota and admission policies, with settings (zero fields take
// their defaults), using config, an administrator's client configuration.
// It returns once the API server enforces the policies: it makes dry-run
// writes as a member identity until the policies refuse them (see
// waitEnforced), so no member write slips through a policy still loading.
func Install(ctx context.Context, config *rest.Config, settings Settings) error {
	settings = settings.WithDefaults()
	objs, err := Objects(settings)
	if err != nil {
		return err
	}
	kube, err := kubernetes.NewForConfig(config)
	if err != nil {
		return err
	}
	for _, obj := range objs {
		if err := apply(ctx, kube, settings, obj); err != nil {
			return err
		}
	}
	return waitEnforced(ctx, config, settings.Namespace)
}

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
	case *rbacv1.Role:
		o.Namespace = namespace
	case *corev1.ConfigMap:
		if o.Name != SettingsName {
			return fmt.Errorf("unexpected ConfigMap %s in broker manifests", o.Name)
		}
		o.Namespace = namespace
		o.Data = settings.data()
	case *corev1.ResourceQuota:
		if o.Name != QuotaName {
			return fmt.Errorf("unexpected ResourceQuota %s in broker manifests", o.Name)
		}
		o.Namespace = namespace
		o.Spec.Hard = quotaHard(settings.MemberBudget, 0)
	case *admissionv1.ValidatingAdmissionPolicy:
	case *admissionv1.ValidatingAdmissionPolicyBinding:
		// Parameters and matched objects are in the broker namespace.
		if o.Spec.ParamRef != nil {
			o.Spec.ParamRef.Namespace = namespace
		}
		if o.Spec.MatchResources == nil || o.Spec.MatchResources.NamespaceSelector == nil {
			return fmt.Errorf("binding %s does not select the broker namespace", o.Name)
		}
		o.Spec.MatchResources.NamespaceSelector.MatchLabels = map[string]string{corev1.LabelMetadataName: namespace}
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
	case *corev1.ConfigMap:
		return upsert(ctx, kube.CoreV1().ConfigMaps(namespace), o, func(cur, want *corev1.ConfigMap) {
			cur.Labels, cur.Data = want.Labels, want.Data
		})
	case *corev1.ResourceQuota:
		return syncQuota(ctx, kube, namespace, settings.MemberBudget, o.Labels)
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
	return createOrUpdate(ctx, want.GetName(),
		func() error { _, err := client.Create(ctx, want, metav1.CreateOptions{}); return err },
		func() error {
			return retry.RetryOnConflict(retry.DefaultRetry, func() error {
				cur, err := client.Get(ctx, want.GetName(), metav1.GetOptions{})
				if err != nil {
					return err
				}
				set(cur, want)
				_, err = client.Update(ctx, cur, metav1.UpdateOptions{})
				return err
			})
		})
}

// ownedBy copies want's owner references, for upsert.
func ownedBy[T metav1.Object](cur, want T) { cur.SetOwnerReferences(want.GetOwnerReferences()) }

func createOrUpdate(ctx context.Context, name string, create, update func() error) error {
	err := create()
	if apierrors.IsAlreadyExists(err) {
		err = update()
	}
	if err != nil {
		return fmt.Errorf("applying %s: %w", name, err)
	}
	return nil
}

// MemberOptions is what the broker's administrator declares about a member
// when it joins.
type MemberOptions struct {
	// PodCIDRs are the member's pod CIDRs: the broker refuses endpoints of
	// the member outside them. At least one is required.
	PodCIDRs []netip.Prefix
}

// AddMember creates the declaration of a member cluster (the ConfigMap
// DeclarationName(clusterID) holding its pod CIDRs, replaced when the member
// joins again) and its broker identity — a ServiceAccount bound to the
// member Role, and a long-lived token for it — owned by the declaration, so
// that deleting the declaration removes the member; it raises the broker
// namespace's ResourceQuota by one member budget and returns the token.
// The member uses it as its broker credential. Install must have run.
func AddMember(ctx context.Context, kube kubernetes.Interface, namespace, clusterID string, opts MemberOptions) (string, error) {
	if err := opts.check(clusterID); err != nil {
		return "", err
	}
	settingsCM, err := kube.CoreV1().ConfigMaps(namespace).Get(ctx, SettingsName, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("reading the broker settings %s/%s (is the broker installed?): %w", namespace, SettingsName, err)
	}
	settings, err := ParseSettings(settingsCM)
	if err != nil {
		return "", err
	}
	decl := declarationObject(namespace, Declaration{Cluster: clusterID, PodCIDRs: opts.PodCIDRs})
	cms := kube.CoreV1().ConfigMaps(namespace)
	err = upsert(ctx, cms, decl, func(cur, want *corev1.ConfigMap) { cur.Labels, cur.Data = want.Labels, want.Data })
	if err != nil {
		return "", fmt.Errorf("declaring member %s: %w", clusterID, err)
	}
	declared, err := cms.Get(ctx, decl.Name, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("reading the declaration of member %s: %w", clusterID, err)
	}
	// The identity belongs to the declaration: deleting the declaration
	// deletes the ServiceAccount (and so its token) and the RoleBinding, so
	// that no member writes without the pod CIDRs that bind its endpoints.
	owner := []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: declared.Name, UID: declared.UID}}
	name := ServiceAccountName(clusterID)
	labels := map[string]string{"app.kubernetes.io/name": "mcsd", LabelMemberCluster: clusterID}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: labels, OwnerReferences: owner}}
	if err := upsert(ctx, kube.CoreV1().ServiceAccounts(namespace), sa, ownedBy); err != nil {
		return "", fmt.Errorf("creating ServiceAccount %s/%s: %w", namespace, name, err)
	}
	if err := syncQuota(ctx, kube, namespace, settings.MemberBudget, nil); err != nil {
		return "", err
	}
	rb := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "mcsd-member-" + clusterID, Namespace: namespace, Labels: labels, OwnerReferences: owner},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: MemberRole},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: namespace}},
	}
	if err := upsert(ctx, kube.RbacV1().RoleBindings(namespace), rb, ownedBy); err != nil {
		return "", fmt.Errorf("binding %s to Role %s: %w", name, MemberRole, err)
	}
	return memberToken(ctx, kube, namespace, name, labels)
}

// check refuses a member without a valid ID or pod CIDRs.
func (opts MemberOptions) check(clusterID string) error {
	if err := clusterid.Validate(clusterID); err != nil {
		return err
	}
	if len(opts.PodCIDRs) == 0 {
		return fmt.Errorf("member %s: no pod CIDRs: the broker would refuse every endpoint it exports", clusterID)
	}
	for _, p := range opts.PodCIDRs {
		if !p.IsValid() {
			return fmt.Errorf("member %s: invalid pod CIDR %s", clusterID, p)
		}
	}
	return nil
}

// memberToken creates the long-lived token Secret of the member's
// ServiceAccount name and returns the token once the token controller has
// filled it in.
func memberToken(ctx context.Context, kube kubernetes.Interface, namespace, name string, labels map[string]string) (string, error) {
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name: name + "-token", Namespace: namespace, Labels: labels,
			Annotations: map[string]string{corev1.ServiceAccountNameKey: name},
		},
		Type: corev1.SecretTypeServiceAccountToken,
	}
	if _, err := kube.CoreV1().Secrets(namespace).Create(ctx, secret, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", fmt.Errorf("creating token Secret for %s: %w", name, err)
	}
	var token string
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		s, err := kube.CoreV1().Secrets(namespace).Get(ctx, secret.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		token = string(s.Data[corev1.ServiceAccountTokenKey])
		return token != "", nil
	})
	if err != nil {
		return "", fmt.Errorf("the token controller never filled Secret %s/%s (is kube-controller-manager running?): %w", namespace, secret.Name, err)
	}
	return token, nil
}

// LabelMemberCluster is the label, with the cluster ID as value, of each
// member's ServiceAccount, RoleBinding and token Secret on the broker; the
// quota counts members by it.
const LabelMemberCluster = "mcsd.io/member-cluster"

// syncQuota sets the broker namespace's ResourceQuota to one budget per
// member (ServiceAccount labelled LabelMemberCluster) and a spare one.
// Labels, when not nil, replace the quota's labels.
func syncQuota(ctx context.Context, kube kubernetes.Interface, namespace string, budget Budget, labels map[string]string) error {
	accounts, err := kube.CoreV1().ServiceAccounts(namespace).List(ctx, metav1.ListOptions{LabelSelector: LabelMemberCluster})
	if err != nil {
		return fmt.Errorf("counting the broker's members: %w", err)
	}
	quotas := kube.CoreV1().ResourceQuotas(namespace)
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		hard := quotaHard(budget, len(accounts.Items))
		q := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: QuotaName, Namespace: namespace, Labels: labels}, Spec: corev1.ResourceQuotaSpec{Hard: hard}}
		return createOrUpdate(ctx, QuotaName,
			func() error { _, err := quotas.Create(ctx, q, metav1.CreateOptions{}); return err },
			func() error {
				cur, err := quotas.Get(ctx, QuotaName, metav1.GetOptions{})
				if err != nil {
					return err
				}
				if labels != nil {
					cur.Labels = labels
				}
				cur.Spec.Hard = hard
				_, err = quotas.Update(ctx, cur, metav1.UpdateOptions{})
				return err
			})
	})
}

// The broker's admission policies (and their bindings, of the same names).
// A refusal by one of them says "ValidatingAdmissionPolicy '<name>'".
const (
	// SourceClusterPolicy binds members to their own labels, names, claims
	// and VIPs, with the settings as its parameter.
	SourceClusterPolicy = "mcsd-broker-source-cluster"
	// EndpointsPolicy binds members' endpoints to their declared pod CIDRs,
	// with the declarations as its parameters.
	EndpointsPolicy = "mcsd-broker-member-endpoints"
)

// probeCluster is the member identity Install's probes write as; they are
// dry runs, so a real member of that name is not disturbed.
const probeCluster = "mcsd-install-probe"

// waitEnforced returns once the API server enforces both admission policies
// for member writes in namespace. The API server loads a new policy (and
// its parameters) asynchronously: until then a member's forbidden write
// goes through. Each probe is a dry-run write that a policy must refuse,
// made as the member identity of probeCluster (with group system:masters,
// so that RBAC allows it and only the policies decide). With an API server
// of several instances, each loads the policies on its own: this checks the
// one that answers.
func waitEnforced(ctx context.Context, config *rest.Config, namespace string) error {
	cfg := rest.CopyConfig(config)
	cfg.Impersonate = rest.ImpersonationConfig{
		UserName: "system:serviceaccount:" + namespace + ":" + ServiceAccountName(probeCluster),
		Groups:   []string{"system:masters", "system:serviceaccounts", "system:serviceaccounts:" + namespace, "system:authenticated"},
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	dryRun := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	labels := map[string]string{mcsv1beta1.LabelSourceCluster: probeCluster}
	probes := []struct {
		policy, want string
		write        func(context.Context) error
	}{{
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
		// A well-named slice with an endpoint of two addresses; refused
		// whatever the declarations (or, with none, for lack of one).
		policy: EndpointsPolicy,
		want:   EndpointsPolicy,
		write: func(ctx context.Context) error {
			_, err := kube.DiscoveryV1().EndpointSlices(namespace).Create(ctx, &discoveryv1.EndpointSlice{
				ObjectMeta: metav1.ObjectMeta{
					Name: "probe.probe." + probeCluster + ".ipv4-0", Namespace: namespace,
					Labels: record.Labels(probeCluster, "probe", "probe"),
				},
				AddressType: discoveryv1.AddressTypeIPv4,
				Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"192.0.2.1", "192.0.2.2"}}},
			}, dryRun)
			return err
		},
	}}
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

func outcome(err error) string {
	if err == nil {
		return "was accepted"
	}
	return "was refused for another reason: " + err.Error()
}
