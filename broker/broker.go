// Package broker prepares a passive broker: a plain kube-apiserver with the
// mcs-api CRDs where member clusters exchange their records. It installs the
// broker namespace, the Role members get, and the admission policy that lets
// each member write only objects labelled with its own cluster ID, and it
// creates each member's identity. Nothing of it runs on the broker
// afterwards.
package broker

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/mcsd-io/mcsd/clusterid"
	"github.com/mcsd-io/mcsd/manifests"
)

// DefaultNamespace is the broker namespace the shipped manifests use.
const DefaultNamespace = "mcsd-broker"

// MemberRole is the Role every member's ServiceAccount is bound to.
const MemberRole = "mcsd-member"

// ServiceAccountName is the broker identity of a member cluster; the
// admission policy reads the cluster ID back from it.
func ServiceAccountName(clusterID string) string { return "cluster-" + clusterID }

// Install creates or updates the broker's namespace, member Role and
// admission policy, placing the namespaced objects in namespace.
func Install(ctx context.Context, kube kubernetes.Interface, namespace string) error {
	for _, file := range manifests.BrokerFiles {
		data, err := manifests.Broker.ReadFile(file)
		if err != nil {
			return err
		}
		objs, err := decode(data)
		if err != nil {
			return fmt.Errorf("%s: %w", file, err)
		}
		for _, obj := range objs {
			if err := apply(ctx, kube, namespace, obj); err != nil {
				return fmt.Errorf("%s: %w", file, err)
			}
		}
	}
	return nil
}

func decode(data []byte) ([]runtime.Object, error) {
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

func apply(ctx context.Context, kube kubernetes.Interface, namespace string, obj runtime.Object) error {
	switch o := obj.(type) {
	case *corev1.Namespace:
		o.Name = namespace
		return createOrUpdate(ctx, o.Name,
			func() error { _, err := kube.CoreV1().Namespaces().Create(ctx, o, metav1.CreateOptions{}); return err },
			func() error {
				cur, err := kube.CoreV1().Namespaces().Get(ctx, o.Name, metav1.GetOptions{})
				if err != nil {
					return err
				}
				cur.Labels = o.Labels
				_, err = kube.CoreV1().Namespaces().Update(ctx, cur, metav1.UpdateOptions{})
				return err
			})
	case *rbacv1.Role:
		o.Namespace = namespace
		roles := kube.RbacV1().Roles(namespace)
		return createOrUpdate(ctx, o.Name,
			func() error { _, err := roles.Create(ctx, o, metav1.CreateOptions{}); return err },
			func() error {
				cur, err := roles.Get(ctx, o.Name, metav1.GetOptions{})
				if err != nil {
					return err
				}
				cur.Rules = o.Rules
				_, err = roles.Update(ctx, cur, metav1.UpdateOptions{})
				return err
			})
	case *admissionv1.ValidatingAdmissionPolicy:
		policies := kube.AdmissionregistrationV1().ValidatingAdmissionPolicies()
		return createOrUpdate(ctx, o.Name,
			func() error { _, err := policies.Create(ctx, o, metav1.CreateOptions{}); return err },
			func() error {
				cur, err := policies.Get(ctx, o.Name, metav1.GetOptions{})
				if err != nil {
					return err
				}
				cur.Spec = o.Spec
				_, err = policies.Update(ctx, cur, metav1.UpdateOptions{})
				return err
			})
	case *admissionv1.ValidatingAdmissionPolicyBinding:
		bindings := kube.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings()
		return createOrUpdate(ctx, o.Name,
			func() error { _, err := bindings.Create(ctx, o, metav1.CreateOptions{}); return err },
			func() error {
				cur, err := bindings.Get(ctx, o.Name, metav1.GetOptions{})
				if err != nil {
					return err
				}
				cur.Spec = o.Spec
				_, err = bindings.Update(ctx, cur, metav1.UpdateOptions{})
				return err
			})
	default:
		return fmt.Errorf("unexpected kind %T in broker manifests", obj)
	}
}

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

// AddMember creates the broker identity of a member cluster — a
// ServiceAccount bound to the member Role, and a long-lived token for it —
// and returns the token. The member uses it as its broker credential.
func AddMember(ctx context.Context, kube kubernetes.Interface, namespace, clusterID string) (string, error) {
	if err := clusterid.Validate(clusterID); err != nil {
		return "", err
	}
	name := ServiceAccountName(clusterID)
	labels := map[string]string{"app.kubernetes.io/name": "mcsd", "mcsd.io/member-cluster": clusterID}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: labels}}
	if _, err := kube.CoreV1().ServiceAccounts(namespace).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", fmt.Errorf("creating ServiceAccount %s/%s: %w", namespace, name, err)
	}
	rb := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "mcsd-member-" + clusterID, Namespace: namespace, Labels: labels},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: MemberRole},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: namespace}},
	}
	if _, err := kube.RbacV1().RoleBindings(namespace).Create(ctx, rb, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", fmt.Errorf("binding %s to Role %s: %w", name, MemberRole, err)
	}
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
