// Package membership joins a member cluster to the broker and removes it:
// it resolves the member's cluster ID as mcsd does, creates the member's
// declaration and broker identity with broker.AddMember, and hands the
// member a kubeconfig of that identity in the Secret mcsd reads
// (--broker-secret=<mcsd's namespace>/mcsd-broker); Leave undoes it. It also
// reads that Secret back, for tools that talk to the broker as the member.
package membership

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	aboutv1beta1 "github.com/mcsd-io/mcsd/apis/about/v1beta1"
	"github.com/mcsd-io/mcsd/broker"
	"github.com/mcsd-io/mcsd/clusterid"
	"github.com/mcsd-io/mcsd/kubectlmcs/status"
)

// The Secret in the member cluster that holds the member's broker
// kubeconfig, as the controller's --broker-secret names it: SecretName in
// mcsd's namespace, SecretNamespace unless mcsd runs in another.
const (
	SecretNamespace = "mcsd-system"
	SecretName      = "mcsd-broker"
	SecretKey       = "kubeconfig"
)

// ClusterIDSource says where ResolveClusterID found the ID.
type ClusterIDSource string

// Sources of a cluster ID, in the order they are tried.
const (
	FromFlag     ClusterIDSource = "flag"
	FromProperty ClusterIDSource = "ClusterProperty " + aboutv1beta1.ClusterIDName
	FromUID      ClusterIDSource = "kube-system namespace UID"
)

// ResolveClusterID returns the cluster ID the member's mcsd uses, without
// recording anything: given (when not empty), else the member's
// ClusterProperty cluster.clusterset.k8s.io, else the UID of its
// kube-system namespace (what mcsd records when no property exists).
// A given ID that disagrees with an existing property is an error: mcsd
// would refuse to start with it.
func ResolveClusterID(ctx context.Context, kube kubernetes.Interface, dyn dynamic.Interface, given string) (string, ClusterIDSource, error) {
	recorded, err := propertyValue(ctx, dyn)
	if err != nil {
		return "", "", err
	}
	switch {
	case given != "" && recorded != "" && given != recorded:
		return "", "", fmt.Errorf("cluster ID %q disagrees with the member's ClusterProperty %s %q: the ID must not change while the cluster is a member", given, aboutv1beta1.ClusterIDName, recorded)
	case given != "":
		return given, FromFlag, clusterid.Validate(given)
	case recorded != "":
		return recorded, FromProperty, clusterid.Validate(recorded)
	}
	ns, err := kube.CoreV1().Namespaces().Get(ctx, metav1.NamespaceSystem, metav1.GetOptions{})
	if err != nil {
		return "", "", fmt.Errorf("reading the member's kube-system namespace for its cluster ID (or give one): %w", err)
	}
	id := string(ns.UID)
	if err := clusterid.Validate(id); err != nil {
		return "", "", fmt.Errorf("the kube-system UID cannot serve as cluster ID, give one: %w", err)
	}
	return id, FromUID, nil
}

// propertyValue is the value of the member's cluster ID property, "" when
// it or its CRD does not exist.
func propertyValue(ctx context.Context, dyn dynamic.Interface) (string, error) {
	u, err := dyn.Resource(aboutv1beta1.SchemeGroupVersion.WithResource(aboutv1beta1.Resource)).Get(ctx, aboutv1beta1.ClusterIDName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) || meta.IsNoMatchError(err) || discovery.IsGroupDiscoveryFailedError(err) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("reading the member's ClusterProperty %s: %w", aboutv1beta1.ClusterIDName, err)
	}
	value, _, _ := unstructuredString(u.Object, "spec", "value")
	return value, nil
}

func unstructuredString(obj map[string]any, fields ...string) (string, bool, error) {
	var cur any = obj
	for _, f := range fields {
		m, ok := cur.(map[string]any)
		if !ok {
			return "", false, nil
		}
		cur = m[f]
	}
	s, ok := cur.(string)
	return s, ok, nil
}

// Options of Join.
type Options struct {
	// BrokerNamespace is the broker namespace (default
	// broker.DefaultNamespace).
	BrokerNamespace string
	// ClusterID is the member's ID; empty resolves it (ResolveClusterID).
	ClusterID string
	// PodCIDRs are the member's pod CIDRs, declared on the broker.
	PodCIDRs []netip.Prefix
	// BrokerServer is the broker's URL as the member's nodes reach it
	// (default: the host of the broker configuration).
	BrokerServer string
	// NoSecret leaves the member cluster untouched: the kubeconfig is only
	// returned.
	NoSecret bool
	// Namespace is mcsd's namespace in the member, where the Secret goes
	// (default SecretNamespace).
	Namespace string
	// Progress, when set, is told what Join does, as it does it.
	Progress func(format string, args ...any)
}

// Result is what Join did.
type Result struct {
	ClusterID string
	Source    ClusterIDSource
	// Kubeconfig is the member's broker kubeconfig.
	Kubeconfig []byte
	// Secret is "namespace/name" of the Secret written in the member, ""
	// with NoSecret.
	Secret string
}

// Join makes the member cluster (member, an administrator's configuration
// of it) a member of the broker (brokerAdmin, an administrator's
// configuration of the broker, where broker.Install has run): it declares
// the member's pod CIDRs and creates its identity with broker.AddMember,
// builds a kubeconfig of that identity, and stores it in the member as the
// Secret mcsd-broker of mcsd's namespace. Joining again replaces the
// declaration and the Secret.
func Join(ctx context.Context, brokerAdmin, member *rest.Config, opts Options) (Result, error) {
	opts = opts.withDefaults(brokerAdmin)
	progress := opts.Progress
	memberKube, brokerKube, res, err := resolve(ctx, brokerAdmin, member, opts)
	if err != nil {
		return res, err
	}
	id := res.ClusterID
	progress("cluster ID %s (from the %s)", id, res.Source)
	progress("declaring member %s on the broker (pod CIDRs %s) and creating its identity %s/%s",
		id, prefixes(opts.PodCIDRs), opts.BrokerNamespace, broker.ServiceAccountName(id))

	// AddMember waits for the broker's controllers (its quota counted, its
	// token filled and authenticated); say so while it does.
	done := make(chan struct{})
	go func() {
		start := time.Now()
		tick := time.NewTicker(2 * time.Second)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				progress("waiting for the broker's controllers to count member %s's quota and fill its token Secret %s/%s-token (%s)",
					id, opts.BrokerNamespace, broker.ServiceAccountName(id), time.Since(start).Round(time.Second))
			}
		}
	}()
	token, err := broker.AddMember(ctx, brokerKube, opts.BrokerNamespace, id, broker.MemberOptions{PodCIDRs: opts.PodCIDRs})
	close(done)
	if err != nil {
		return res, err
	}
	ca, err := brokerCA(ctx, brokerKube, opts.BrokerNamespace, id, brokerAdmin)
	if err != nil {
		return res, err
	}
	res.Kubeconfig, err = Kubeconfig(opts.BrokerServer, ca, broker.ServiceAccountName(id), token, opts.BrokerNamespace)
	if err != nil {
		return res, err
	}
	progress("identity %s/%s has its token; broker server %s", opts.BrokerNamespace, broker.ServiceAccountName(id), opts.BrokerServer)
	if opts.NoSecret {
		return res, nil
	}
	if err := WriteSecret(ctx, memberKube, opts.Namespace, res.Kubeconfig); err != nil {
		return res, err
	}
	res.Secret = opts.Namespace + "/" + SecretName
	progress("wrote Secret %s in the member", res.Secret)
	return res, nil
}

// Preview is what Join would do, doing nothing: the member's cluster ID
// and the kubeconfig it would store, with the token of the member's
// broker identity when it has one already, else the placeholder
// TokenPlaceholder.
func Preview(ctx context.Context, brokerAdmin, member *rest.Config, opts Options) (Result, error) {
	opts = opts.withDefaults(brokerAdmin)
	_, brokerKube, res, err := resolve(ctx, brokerAdmin, member, opts)
	if err != nil {
		return res, err
	}
	id := res.ClusterID
	token, ca := TokenPlaceholder, []byte(nil)
	s, err := brokerKube.CoreV1().Secrets(opts.BrokerNamespace).Get(ctx, broker.ServiceAccountName(id)+"-token", metav1.GetOptions{})
	switch {
	case err == nil && len(s.Data[corev1.ServiceAccountTokenKey]) > 0:
		token = string(s.Data[corev1.ServiceAccountTokenKey])
		ca = s.Data[corev1.ServiceAccountRootCAKey]
	case err != nil && !apierrors.IsNotFound(err):
		return res, fmt.Errorf("reading the member's token Secret: %w", err)
	}
	if len(ca) == 0 {
		cfg := rest.CopyConfig(brokerAdmin)
		if err := rest.LoadTLSFiles(cfg); err == nil {
			ca = cfg.CAData
		}
	}
	if !opts.NoSecret {
		res.Secret = opts.Namespace + "/" + SecretName
	}
	res.Kubeconfig, err = Kubeconfig(opts.BrokerServer, ca, broker.ServiceAccountName(id), token, opts.BrokerNamespace)
	return res, err
}

// withDefaults is opts with its defaults for the broker of brokerAdmin.
func (opts Options) withDefaults(brokerAdmin *rest.Config) Options {
	if opts.Progress == nil {
		opts.Progress = func(string, ...any) {}
	}
	if opts.BrokerNamespace == "" {
		opts.BrokerNamespace = broker.DefaultNamespace
	}
	if opts.BrokerServer == "" {
		opts.BrokerServer = brokerAdmin.Host
	}
	if opts.Namespace == "" {
		opts.Namespace = SecretNamespace
	}
	return opts
}

// resolve makes the clients of Join and Preview and resolves the
// member's cluster ID.
func resolve(ctx context.Context, brokerAdmin, member *rest.Config, opts Options) (kubernetes.Interface, kubernetes.Interface, Result, error) {
	m, err := status.NewClients(member)
	if err != nil {
		return nil, nil, Result{}, err
	}
	brokerKube, err := kubernetes.NewForConfig(brokerAdmin)
	if err != nil {
		return nil, nil, Result{}, err
	}
	id, source, err := ResolveClusterID(ctx, m.Kube, m.Dynamic, opts.ClusterID)
	return m.Kube, brokerKube, Result{ClusterID: id, Source: source}, err
}

// TokenPlaceholder stands in a previewed kubeconfig for the token the
// broker has not made yet.
const TokenPlaceholder = "TOKEN-CREATED-BY-JOIN"

// brokerCA is the CA that signs the broker's serving certificate: the
// ca.crt of the member's token Secret (the broker's root CA, as the token
// controller writes it), else the one of the administrator's configuration.
func brokerCA(ctx context.Context, kube kubernetes.Interface, namespace, id string, admin *rest.Config) ([]byte, error) {
	s, err := kube.CoreV1().Secrets(namespace).Get(ctx, broker.ServiceAccountName(id)+"-token", metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("reading the member's token Secret: %w", err)
	}
	if ca := s.Data[corev1.ServiceAccountRootCAKey]; len(ca) > 0 {
		return ca, nil
	}
	cfg := rest.CopyConfig(admin)
	if err := rest.LoadTLSFiles(cfg); err != nil {
		return nil, fmt.Errorf("reading the broker's CA from the administrator's configuration: %w", err)
	}
	// Empty: the broker's certificate is signed by a CA the system trusts.
	return cfg.CAData, nil
}

// Kubeconfig is a kubeconfig of one context "broker" for the member
// identity account with token, in the broker namespace.
func Kubeconfig(server string, ca []byte, account, token, namespace string) ([]byte, error) {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["broker"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: ca}
	kc.AuthInfos[account] = &clientcmdapi.AuthInfo{Token: token}
	kc.Contexts["broker"] = &clientcmdapi.Context{Cluster: "broker", AuthInfo: account, Namespace: namespace}
	kc.CurrentContext = "broker"
	return clientcmd.Write(*kc)
}

// Secret is the member's Secret mcsd-broker of namespace, mcsd's, holding
// kubeconfig, as WriteSecret writes it.
func Secret(namespace string, kubeconfig []byte) *corev1.Secret {
	return &corev1.Secret{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: metav1.ObjectMeta{Name: SecretName, Namespace: namespace, Labels: map[string]string{"app.kubernetes.io/name": "mcsd"}},
		Type:       corev1.SecretTypeOpaque,
		Data:       map[string][]byte{SecretKey: kubeconfig},
	}
}

// WriteSecret creates or replaces the member's Secret mcsd-broker of
// namespace with kubeconfig, creating the namespace if needed; a Secret
// that already holds it is left alone.
func WriteSecret(ctx context.Context, kube kubernetes.Interface, namespace string, kubeconfig []byte) error {
	_, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating namespace %s in the member: %w", namespace, err)
	}
	secrets := kube.CoreV1().Secrets(namespace)
	want := Secret(namespace, kubeconfig)
	_, err = secrets.Create(ctx, want, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		var cur *corev1.Secret
		if cur, err = secrets.Get(ctx, SecretName, metav1.GetOptions{}); err == nil && !bytes.Equal(cur.Data[SecretKey], kubeconfig) {
			cur.Data = want.Data
			_, err = secrets.Update(ctx, cur, metav1.UpdateOptions{})
		}
	}
	if err != nil {
		return fmt.Errorf("writing Secret %s/%s in the member: %w", namespace, SecretName, err)
	}
	return nil
}

// ErrNoSecret is returned by BrokerConfig when the member has no broker
// Secret.
var ErrNoSecret = errors.New("no broker Secret " + SecretName + " in the member (join it first)")

// BrokerConfig is BrokerConfigIn of SecretNamespace.
func BrokerConfig(ctx context.Context, memberKube kubernetes.Interface) (*rest.Config, string, error) {
	return BrokerConfigIn(ctx, memberKube, SecretNamespace)
}

// BrokerConfigIn reads the member's broker kubeconfig from its Secret in
// namespace, mcsd's, and returns the configuration of the member's broker
// identity and the namespace of its context (the broker namespace, ""
// when unset).
func BrokerConfigIn(ctx context.Context, memberKube kubernetes.Interface, namespace string) (*rest.Config, string, error) {
	name := namespace + "/" + SecretName
	s, err := memberKube.CoreV1().Secrets(namespace).Get(ctx, SecretName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, "", fmt.Errorf("%s: %w", name, ErrNoSecret)
	}
	if err != nil {
		return nil, "", fmt.Errorf("reading the member's broker Secret %s: %w", name, err)
	}
	data := s.Data[SecretKey]
	if len(data) == 0 {
		return nil, "", fmt.Errorf("the member's broker Secret %s has no key %q", name, SecretKey)
	}
	cc, err := clientcmd.NewClientConfigFromBytes(data)
	if err != nil {
		return nil, "", fmt.Errorf("the member's broker Secret %s: %w", name, err)
	}
	cfg, err := cc.ClientConfig()
	if err != nil {
		return nil, "", fmt.Errorf("the member's broker Secret %s: %w", name, err)
	}
	ns, _, _ := cc.Namespace()
	raw, _ := cc.RawConfig()
	if c := raw.Contexts[raw.CurrentContext]; c == nil || c.Namespace == "" {
		ns = ""
	}
	return cfg, ns, nil
}

// Leave removes member id from the broker (broker.RemoveMember): its
// declaration and the identity it owns, its namespace with its records,
// EndpointSlices and Lease, its ClusterSetIP claims; it waits until nothing
// of the member is left on the broker and otherwise says what is. With
// memberKube not nil it also deletes the member's broker Secret, in
// mcsdNamespace.
func Leave(ctx context.Context, brokerAdmin *rest.Config, memberKube kubernetes.Interface, mcsdNamespace, namespace, id string, progress func(string, ...any)) error {
	brk, err := status.NewClients(brokerAdmin)
	if err != nil {
		return err
	}
	brokerKube, brokerMCS := brk.Kube, brk.MCS
	if progress == nil {
		progress = func(string, ...any) {}
	}
	if namespace == "" {
		namespace = broker.DefaultNamespace
	}
	if err := broker.RemoveMember(ctx, brokerKube, brokerMCS, namespace, id, time.Minute, progress); err != nil {
		return err
	}
	if memberKube != nil {
		if mcsdNamespace == "" {
			mcsdNamespace = SecretNamespace
		}
		err := memberKube.CoreV1().Secrets(mcsdNamespace).Delete(ctx, SecretName, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting Secret %s/%s in the member: %w", mcsdNamespace, SecretName, err)
		}
		progress("deleted Secret %s/%s in the member", mcsdNamespace, SecretName)
	}
	return nil
}

func prefixes(ps []netip.Prefix) string {
	s := ""
	for i, p := range ps {
		if i > 0 {
			s += ","
		}
		s += p.String()
	}
	return s
}
