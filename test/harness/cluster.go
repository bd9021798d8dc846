package harness

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"time"

	apiextclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	mcsclient "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned"
)

// Cluster is one Kubernetes control plane on loopback: etcd, kube-apiserver
// (TLS, RBAC, client-certificate and ServiceAccount-token auth) and a
// kube-controller-manager running the controllers a node-less cluster needs.
type Cluster struct {
	// Name is "broker" or "cluster1", "cluster2", ...
	Name string
	// Index is 0 for the broker and 1..N for members.
	Index int
	// ServiceCIDR is the range the API server allocates ClusterIPs from.
	ServiceCIDR netip.Prefix
	// PodCIDR is the range harness pods of this cluster get addresses from.
	PodCIDR netip.Prefix
	// KubeconfigPath is an admin kubeconfig for this cluster.
	KubeconfigPath string
	// Config is the admin client configuration (group system:masters).
	Config *rest.Config

	Kube          kubernetes.Interface
	MCS           mcsclient.Interface
	Dynamic       dynamic.Interface
	APIExtensions apiextclient.Interface

	dir           string
	ca            *authority
	bins          binaries
	apiserverPort int
	etcd          *process
	apiserver     *process
	kcm           *process
	network       *Network
	nodes         int
}

// Server is the API server's URL.
func (c *Cluster) Server() string { return "https://127.0.0.1:" + strconv.Itoa(c.apiserverPort) }

// UserConfig returns a client configuration authenticated by a client
// certificate for the given user and groups, for tests of RBAC and admission.
func (c *Cluster) UserConfig(user string, groups ...string) (*rest.Config, error) {
	kp, err := c.ca.issue(user, groups, false)
	if err != nil {
		return nil, err
	}
	return &rest.Config{
		Host:            c.Server(),
		TLSClientConfig: rest.TLSClientConfig{CAData: c.ca.certPEM, CertData: kp.CertPEM, KeyData: kp.KeyPEM},
		QPS:             200,
		Burst:           400,
	}, nil
}

// TokenConfig returns a client configuration that authenticates with a
// bearer token, such as a ServiceAccount token.
func (c *Cluster) TokenConfig(token string) *rest.Config {
	return &rest.Config{
		Host:            c.Server(),
		TLSClientConfig: rest.TLSClientConfig{CAData: c.ca.certPEM},
		BearerToken:     token,
		QPS:             200,
		Burst:           400,
	}
}

// WriteKubeconfig writes cfg as a kubeconfig file with one context named
// after the cluster.
func (c *Cluster) WriteKubeconfig(path string, cfg *rest.Config) error {
	kc := clientcmdapi.NewConfig()
	kc.Clusters[c.Name] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos[c.Name] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken}
	kc.Contexts[c.Name] = &clientcmdapi.Context{Cluster: c.Name, AuthInfo: c.Name}
	kc.CurrentContext = c.Name
	return clientcmd.WriteToFile(*kc, path)
}

// FreePort returns a TCP port on 127.0.0.1 that nothing listens on now.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// start brings the control plane up and returns when the API server is ready
// and kube-controller-manager is running its controllers.
func (c *Cluster) start(ctx context.Context) error {
	if err := os.MkdirAll(c.dir, 0o700); err != nil {
		return err
	}
	etcdClient, err := FreePort()
	if err != nil {
		return err
	}
	etcdPeer, err := FreePort()
	if err != nil {
		return err
	}
	if c.apiserverPort, err = FreePort(); err != nil {
		return err
	}

	c.etcd = &process{
		name: c.Name + "-etcd", path: c.bins.etcd, logPath: filepath.Join(c.dir, "etcd.log"), pidDir: filepath.Dir(c.dir),
		args: []string{
			"--name=" + c.Name,
			"--data-dir=" + filepath.Join(c.dir, "etcd"),
			fmt.Sprintf("--listen-client-urls=http://127.0.0.1:%d", etcdClient),
			fmt.Sprintf("--advertise-client-urls=http://127.0.0.1:%d", etcdClient),
			fmt.Sprintf("--listen-peer-urls=http://127.0.0.1:%d", etcdPeer),
			fmt.Sprintf("--initial-advertise-peer-urls=http://127.0.0.1:%d", etcdPeer),
			fmt.Sprintf("--initial-cluster=%s=http://127.0.0.1:%d", c.Name, etcdPeer),
			"--logger=zap", "--log-level=warn",
		},
	}
	if err := c.etcd.start(); err != nil {
		return err
	}
	if err := waitHTTP(ctx, fmt.Sprintf("http://127.0.0.1:%d/health", etcdClient), c.etcd); err != nil {
		return fmt.Errorf("%s etcd: %w", c.Name, err)
	}

	pki := filepath.Join(c.dir, "pki")
	if err := os.MkdirAll(pki, 0o700); err != nil {
		return err
	}
	caPath := filepath.Join(pki, "ca.crt")
	if err := os.WriteFile(caPath, c.ca.certPEM, 0o600); err != nil {
		return err
	}
	serving, err := c.ca.issue("kube-apiserver", nil, true)
	if err != nil {
		return err
	}
	servingCert, servingKey, err := writePair(pki, "apiserver", serving)
	if err != nil {
		return err
	}
	saPub, saKey, err := writeServiceAccountKeys(pki)
	if err != nil {
		return err
	}
	c.apiserver = &process{
		name: c.Name + "-apiserver", path: c.bins.apiserver, logPath: filepath.Join(c.dir, "apiserver.log"), pidDir: filepath.Dir(c.dir),
		args: []string{
			fmt.Sprintf("--etcd-servers=http://127.0.0.1:%d", etcdClient),
			"--bind-address=127.0.0.1",
			"--advertise-address=127.0.0.1",
			fmt.Sprintf("--secure-port=%d", c.apiserverPort),
			"--tls-cert-file=" + servingCert,
			"--tls-private-key-file=" + servingKey,
			"--client-ca-file=" + caPath,
			"--authorization-mode=RBAC",
			"--service-cluster-ip-range=" + c.ServiceCIDR.String(),
			"--service-account-issuer=https://" + c.Name + ".harness.mcsd.invalid",
			"--service-account-key-file=" + saPub,
			"--service-account-signing-key-file=" + saKey,
			"--endpoint-reconciler-type=none",
			"--cert-dir=" + pki,
			"--profiling=false",
			"--v=1",
		},
	}
	if err := c.startAPIServer(ctx); err != nil {
		return err
	}

	if err := c.connect(); err != nil {
		return err
	}
	// CRDs go in before kube-controller-manager starts, so its garbage
	// collector watches their kinds from the start instead of after its next
	// discovery resync (30 s).
	if err := c.installCRDs(ctx); err != nil {
		return err
	}

	kcmConfig := filepath.Join(c.dir, "kube-controller-manager.kubeconfig")
	adminForKCM, err := c.UserConfig("system:kube-controller-manager", "system:masters")
	if err != nil {
		return err
	}
	if err := c.WriteKubeconfig(kcmConfig, adminForKCM); err != nil {
		return err
	}
	c.kcm = &process{
		name: c.Name + "-controller-manager", path: c.bins.controllerManager, logPath: filepath.Join(c.dir, "controller-manager.log"), pidDir: filepath.Dir(c.dir),
		args: []string{
			"--kubeconfig=" + kcmConfig,
			// No kubelets run here: the node lifecycle controller would taint
			// harness Nodes and evict their Pods, so only what is needed runs.
			"--controllers=namespace-controller,garbage-collector-controller,endpointslice-controller,serviceaccount-controller,serviceaccount-token-controller,root-ca-certificate-publisher-controller,clusterrole-aggregation-controller",
			"--service-account-private-key-file=" + saKey,
			"--root-ca-file=" + caPath,
			"--leader-elect=false",
			"--secure-port=0",
			"--kube-api-qps=200", "--kube-api-burst=400",
			"--v=1",
		},
	}
	if err := c.kcm.start(); err != nil {
		return err
	}
	// The default ServiceAccount appears once the controllers run.
	return wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		if done, err := c.kcm.exited(); done {
			return false, fmt.Errorf("%s kube-controller-manager exited: %v\n%s", c.Name, err, c.kcm.tail(20))
		}
		_, err := c.Kube.CoreV1().ServiceAccounts(metav1.NamespaceDefault).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	})
}

// startAPIServer (re)starts kube-apiserver on its port and waits until ready.
func (c *Cluster) startAPIServer(ctx context.Context) error {
	if err := c.apiserver.start(); err != nil {
		return err
	}
	admin, err := c.UserConfig("harness-admin", "system:masters")
	if err != nil {
		return err
	}
	tr, err := rest.TransportFor(admin)
	if err != nil {
		return err
	}
	client := &http.Client{Transport: tr, Timeout: 5 * time.Second}
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		if done, err := c.apiserver.exited(); done {
			return false, fmt.Errorf("exited: %v\n%s", err, c.apiserver.tail(20))
		}
		resp, err := client.Get(c.Server() + "/readyz")
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		return fmt.Errorf("%s kube-apiserver not ready: %w", c.Name, err)
	}
	return nil
}

// StopAPIServer kills the API server (etcd keeps its data), to test what
// clients do while it is gone.
func (c *Cluster) StopAPIServer() { c.apiserver.stop() }

// StartAPIServer brings a stopped API server back on the same address.
func (c *Cluster) StartAPIServer(ctx context.Context) error { return c.startAPIServer(ctx) }

func (c *Cluster) connect() error {
	admin, err := c.UserConfig("harness-admin", "system:masters")
	if err != nil {
		return err
	}
	c.Config = admin
	c.KubeconfigPath = filepath.Join(c.dir, "kubeconfig")
	if err := c.WriteKubeconfig(c.KubeconfigPath, admin); err != nil {
		return err
	}
	if c.Kube, err = kubernetes.NewForConfig(admin); err != nil {
		return err
	}
	if c.MCS, err = mcsclient.NewForConfig(admin); err != nil {
		return err
	}
	if c.Dynamic, err = dynamic.NewForConfig(admin); err != nil {
		return err
	}
	c.APIExtensions, err = apiextclient.NewForConfig(admin)
	return err
}

func (c *Cluster) stop() {
	// The API server goes before its etcd: the other order can hang it.
	for _, p := range []*process{c.kcm, c.apiserver, c.etcd} {
		if p != nil {
			p.stop()
		}
	}
}

func waitHTTP(ctx context.Context, url string, p *process) error {
	client := &http.Client{Timeout: 2 * time.Second}
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		if done, err := p.exited(); done {
			return false, fmt.Errorf("exited: %v\n%s", err, p.tail(20))
		}
		resp, err := client.Get(url)
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
}
