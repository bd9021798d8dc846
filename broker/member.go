package broker

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/mcsd-io/mcsd/clusterid"
	"github.com/mcsd-io/mcsd/internal/record"
)

// LabelMemberCluster is the label, with the cluster ID as value, of each
// member's namespace, ServiceAccount, RoleBindings and token Secret on the
// broker. On the namespace it is what the admission policy reads to know
// whose namespace it is.
const LabelMemberCluster = "mcsd.io/member-cluster"

// MemberOptions is what the broker's administrator declares about a member
// when it joins.
type MemberOptions struct {
	// PodCIDRs are the member's pod CIDRs: the broker refuses endpoints of
	// the member outside them. At least one is required, and none may
	// overlap another member's.
	PodCIDRs []netip.Prefix
}

// AddMember creates the declaration of a member cluster (the ConfigMap
// DeclarationName(clusterID) holding its pod CIDRs, replaced when the member
// joins again) and its broker identity — a ServiceAccount bound to the
// member Role, and a long-lived token for it — owned by the declaration, so
// that deleting the declaration removes the identity; and the member's own
// namespace (record.MemberNamespace), where it alone writes, with its
// ResourceQuota (the settings' member budget). It returns the token, once
// the quota is in force. The member uses it as its broker credential.
// Install must have run. It refuses pod CIDRs that overlap another
// member's, and a member beyond the settings' maxMembers.
func AddMember(ctx context.Context, kube kubernetes.Interface, namespace, clusterID string, opts MemberOptions) (string, error) {
	if err := opts.check(clusterID); err != nil {
		return "", err
	}
	settings, err := admit(ctx, kube, namespace, clusterID, opts)
	if err != nil {
		return "", err
	}
	decl := declarationObject(namespace, Declaration{Cluster: clusterID, PodCIDRs: opts.PodCIDRs})
	cms := kube.CoreV1().ConfigMaps(namespace)
	if err := upsert(ctx, cms, decl, setData); err != nil {
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
	labels := memberLabels(clusterID)
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: labels, OwnerReferences: owner}}
	if err := upsert(ctx, kube.CoreV1().ServiceAccounts(namespace), sa, ownedBy); err != nil {
		return "", fmt.Errorf("creating ServiceAccount %s/%s: %w", namespace, name, err)
	}
	rb := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: MemberRole + "-" + clusterID, Namespace: namespace, Labels: labels, OwnerReferences: owner},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: MemberRole},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: namespace}},
	}
	if err := applyRoleBinding(ctx, kube, rb); err != nil {
		return "", fmt.Errorf("binding %s to Role %s: %w", name, MemberRole, err)
	}
	if err := ensureMemberNamespace(ctx, kube, settings, clusterID); err != nil {
		return "", err
	}
	if err := waitQuota(ctx, kube, record.MemberNamespace(namespace, clusterID)); err != nil {
		return "", err
	}
	return memberToken(ctx, kube, namespace, name, labels)
}

// check refuses a member without a valid ID of its own or pod CIDRs.
func (opts MemberOptions) check(clusterID string) error {
	if err := clusterid.Validate(clusterID); err != nil {
		return err
	}
	if clusterID == probeCluster {
		return fmt.Errorf("member %s: the ID is the broker's own, for its admission probes", clusterID)
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

// admit reads the broker's settings and refuses a member beyond their
// maxMembers, or one whose pod CIDRs overlap another member's.
func admit(ctx context.Context, kube kubernetes.Interface, namespace, clusterID string, opts MemberOptions) (Settings, error) {
	settingsCM, err := kube.CoreV1().ConfigMaps(namespace).Get(ctx, SettingsName, metav1.GetOptions{})
	if err != nil {
		return Settings{}, fmt.Errorf("reading the broker settings %s/%s (is the broker installed?): %w", namespace, SettingsName, err)
	}
	settings, err := ParseSettings(settingsCM)
	if err != nil {
		return Settings{}, err
	}
	members, err := Members(ctx, kube, namespace)
	if err != nil {
		return Settings{}, err
	}
	if !slices.Contains(members, clusterID) && len(members) >= settings.MaxMembers {
		return Settings{}, fmt.Errorf("member %s: the broker has %d members, as many as its settings allow (%s); raise it with kubectl mcs broker install --max-members, if the etcd quota allows",
			clusterID, len(members), settingMaxMembers)
	}
	return settings, checkPodCIDRs(ctx, kube, namespace, clusterID, opts.PodCIDRs)
}

// ownedBy copies want's owner references, for upsert.
func ownedBy[T metav1.Object](cur, want T) { cur.SetOwnerReferences(want.GetOwnerReferences()) }

func memberLabels(clusterID string) map[string]string {
	return map[string]string{"app.kubernetes.io/name": "mcsd", LabelMemberCluster: clusterID}
}

// Members returns the IDs of the broker's members: its ServiceAccounts
// labelled LabelMemberCluster, sorted.
func Members(ctx context.Context, kube kubernetes.Interface, namespace string) ([]string, error) {
	accounts, err := kube.CoreV1().ServiceAccounts(namespace).List(ctx, metav1.ListOptions{LabelSelector: LabelMemberCluster})
	if err != nil {
		return nil, fmt.Errorf("listing the broker's members: %w", err)
	}
	var out []string
	for _, a := range accounts.Items {
		if id := a.Labels[LabelMemberCluster]; id != "" && a.Name == ServiceAccountName(id) {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// checkPodCIDRs refuses pod CIDRs of clusterID that overlap another
// member's declared ones: the broker's endpoint rule would then let either
// publish the other's pods.
func checkPodCIDRs(ctx context.Context, kube kubernetes.Interface, namespace, clusterID string, cidrs []netip.Prefix) error {
	decls, err := kube.CoreV1().ConfigMaps(namespace).List(ctx, metav1.ListOptions{LabelSelector: LabelDeclaration})
	if err != nil {
		return fmt.Errorf("reading the members' declarations: %w", err)
	}
	var clashes []string
	for i := range decls.Items {
		d, err := ParseDeclaration(&decls.Items[i])
		if err != nil || d.Cluster == clusterID {
			continue
		}
		for _, mine := range cidrs {
			for _, theirs := range d.PodCIDRs {
				if mine.Masked().Overlaps(theirs) {
					clashes = append(clashes, fmt.Sprintf("%s overlaps %s of member %s", mine.Masked(), theirs, d.Cluster))
				}
			}
		}
	}
	if len(clashes) > 0 {
		return fmt.Errorf("member %s: pod CIDRs %s: each member's endpoints must lie in pod CIDRs of its own, or the broker cannot tell whose pods they are",
			clusterID, strings.Join(clashes, "; "))
	}
	return nil
}

// memberNamespaceObject is clusterID's namespace on the broker of
// namespace, labelled so that the admission policies bind it and know
// whose it is.
func memberNamespaceObject(namespace, clusterID string) *corev1.Namespace {
	labels := memberLabels(clusterID)
	labels[LabelBroker] = namespace
	labels["app.kubernetes.io/component"] = "broker"
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: record.MemberNamespace(namespace, clusterID), Labels: labels}}
}

// ensureMemberNamespace creates or updates clusterID's namespace, the
// RoleBinding there that lets its identity write its records, and the
// ResourceQuota that holds them to its budget. A namespace of that name
// that is not the member's (not labelled for it on this broker) is not
// taken over.
func ensureMemberNamespace(ctx context.Context, kube kubernetes.Interface, settings Settings, clusterID string) error {
	want := memberNamespaceObject(settings.Namespace, clusterID)
	name := want.Name
	namespaces := kube.CoreV1().Namespaces()
	cur, err := namespaces.Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		if _, err := namespaces.Create(ctx, want, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating the namespace %s of member %s: %w", name, clusterID, err)
		}
	case err != nil:
		return fmt.Errorf("reading the namespace %s of member %s: %w", name, clusterID, err)
	case cur.Labels[LabelBroker] != settings.Namespace || cur.Labels[LabelMemberCluster] != clusterID:
		return fmt.Errorf("member %s: the namespace %s exists but is not the member's on broker %s (labels %s=%q, %s=%q): delete or rename it, or use another cluster ID",
			clusterID, name, settings.Namespace, LabelBroker, cur.Labels[LabelBroker], LabelMemberCluster, cur.Labels[LabelMemberCluster])
	case cur.DeletionTimestamp != nil:
		return fmt.Errorf("member %s: its namespace %s is being deleted (the member left): wait until it is gone, then join again", clusterID, name)
	}
	rb := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: MemberWriterRole, Namespace: name, Labels: memberLabels(clusterID)},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: MemberWriterRole},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: ServiceAccountName(clusterID), Namespace: settings.Namespace}},
	}
	if err := applyRoleBinding(ctx, kube, rb); err != nil {
		return fmt.Errorf("binding member %s to ClusterRole %s in %s: %w", clusterID, MemberWriterRole, name, err)
	}
	q := &corev1.ResourceQuota{
		ObjectMeta: metav1.ObjectMeta{Name: MemberQuotaName, Namespace: name, Labels: memberLabels(clusterID)},
		Spec:       corev1.ResourceQuotaSpec{Hard: memberQuota(settings.MemberBudget)},
	}
	err = upsert(ctx, kube.CoreV1().ResourceQuotas(name), q, func(cur, want *corev1.ResourceQuota) { cur.Spec.Hard = want.Spec.Hard })
	if err != nil {
		return fmt.Errorf("setting the ResourceQuota of member %s in %s: %w", clusterID, name, err)
	}
	return nil
}

// applyRoleBinding creates rb or brings an existing one to its subjects,
// labels and owners (a binding's role never changes).
func applyRoleBinding(ctx context.Context, kube kubernetes.Interface, rb *rbacv1.RoleBinding) error {
	return upsert(ctx, kube.RbacV1().RoleBindings(rb.Namespace), rb, func(cur, want *rbacv1.RoleBinding) {
		cur.Labels, cur.OwnerReferences, cur.Subjects = want.Labels, want.OwnerReferences, want.Subjects
	})
}

// waitQuota waits until the broker's ResourceQuota controller has counted
// the member namespace's usage: until then the API server refuses every
// write the quota covers ("status unknown for quota"). A quota created
// before the controller knew the ServiceImport resource (a join within a
// minute of the CRDs' install, without broker install's wait) is counted
// at the controller's next full resync, every 5 minutes.
func waitQuota(ctx context.Context, kube kubernetes.Interface, namespace string) error {
	var last *corev1.ResourceQuota
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 6*time.Minute, true, func(ctx context.Context) (bool, error) {
		q, err := kube.CoreV1().ResourceQuotas(namespace).Get(ctx, MemberQuotaName, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		last = q
		return counted(q), nil
	})
	if err != nil {
		status := "none"
		if last != nil {
			status = fmt.Sprintf("%v", last.Status.Hard)
		}
		return fmt.Errorf("the ResourceQuota %s/%s was never counted (status %s; does the broker's kube-controller-manager run the resourcequota controller?): %w",
			namespace, MemberQuotaName, status, err)
	}
	return nil
}
