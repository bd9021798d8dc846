package harness

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/mcsd-io/mcsd/test/lib/ports"

	corev1 "k8s.io/api/core/v1"
	apiextclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/klog/v2"
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
	// IPFamilies are the cluster's IP families, its preferred one first.
	IPFamilies []corev1.IPFamily
	// ServiceCIDR is the range the API server allocates ClusterIPs of the
	// first IP family from; ServiceCIDRs has one range per family.
	ServiceCIDR  netip.Prefix
	ServiceCIDRs []netip.Prefix
	// PodCIDR is the range harness pods of this cluster get addresses of
	// the first IP family from; PodCIDRs has one range per family.
	PodCIDR  netip.Prefix
	PodCIDRs []netip.Prefix
	// KubeconfigPath is an admin kubeconfig for this cluster.
	KubeconfigPath string
	// GatewayKubeconfigPath, in runs with real nodes, is the same admin
	// kubeconfig with the API server's gateway address, for tools run in
	// the run's Operator namespace.
	GatewayKubeconfigPath string
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

	// gateway, in runs with real nodes, makes the API server reachable
	// from nodes and pods, and them from it (gateway.go).
	gateway *gateway
	// real clusters run kubelets: their API server authorizes nodes and
	// reaches kubelets, kube-scheduler runs, and the controller manager
	// runs what Deployments and DaemonSets need.
	real      bool
	nodeBins  nodeBinaries
	scheduler *process
	realNodes []*RealNode
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

// startAttempts is how often a control plane is started afresh (new ports,
// new data) before the harness gives up on it.
const startAttempts = 3

// startWithRetries starts the control plane, trying again from scratch
// when an attempt fails: a port taken between choosing and binding it, or
// a machine so busy that etcd or the API server missed its budget. The
// error names every attempt's failure.
func (c *Cluster) startWithRetries(ctx context.Context) error {
	var errs []error
	for attempt := 1; attempt <= startAttempts; attempt++ {
		began := time.Now()
		err := c.start(ctx)
		if err == nil {
			return nil
		}
		errs = append(errs, fmt.Errorf("attempt %d of %d (after %v): %w", attempt, startAttempts, time.Since(began).Round(time.Millisecond), err))
		c.stop()
		c.etcd, c.apiserver, c.kcm, c.scheduler = nil, nil, nil, nil
		if rmErr := os.RemoveAll(c.dir); rmErr != nil {
			errs = append(errs, rmErr)
			break
		}
		if ctx.Err() != nil {
			break
		}
		klog.InfoS("Starting a harness control plane failed; trying again", "cluster", c.Name, "attempt", attempt, "err", err)
	}
	return errors.Join(errs...)
}

// etcdBudget is how long one attempt waits for etcd to be healthy. Idle,
// it takes well under a second; with a dozen control planes and the Go
// compiler on two cores, tens of seconds.
const etcdBudget = 2 * time.Minute

// start brings the control plane up and returns when the API server is ready
// and kube-controller-manager is running its controllers.
func (c *Cluster) start(ctx context.Context) error {
	if err := os.MkdirAll(c.dir, 0o700); err != nil {
		return err
	}
	etcdClient, err := ports.Free()
	if err != nil {
		return err
	}
	etcdPeer, err := ports.Free()
	if err != nil {
		return err
	}
	if c.apiserverPort, err = ports.Free(); err != nil {
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
	if err := waitHTTP(ctx, fmt.Sprintf("http://127.0.0.1:%d/health", etcdClient), c.etcd, etcdBudget); err != nil {
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
	if c.gateway != nil {
		// Nodes reach it at the gateway, pods at the kubernetes Service.
		serving, err = c.ca.issueServer("kube-apiserver",
			[]net.IP{net.ParseIP("127.0.0.1"), net.IP(GatewayIP.AsSlice()), net.ParseIP(c.APIServiceIP())},
			[]string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"})
	}
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
			"--service-cluster-ip-range=" + joinPrefixes(c.ServiceCIDRs),
			"--service-account-issuer=https://" + c.Name + ".harness.mcsd.invalid",
			"--service-account-key-file=" + saPub,
			"--service-account-signing-key-file=" + saKey,
			"--endpoint-reconciler-type=none",
			"--cert-dir=" + pki,
			"--profiling=false",
			"--v=1",
		},
	}
	if c.gateway != nil {
		extra, err := c.gatewayFlags(pki)
		if err != nil {
			return err
		}
		c.apiserver.args = append(withoutFlags(c.apiserver.args, "--advertise-address", "--endpoint-reconciler-type", "--authorization-mode"), extra...)
	}
	if err := c.startAPIServer(ctx); err != nil {
		return err
	}
	if c.gateway != nil {
		if err := c.gateway.forward(c.apiserverPort); err != nil {
			return err
		}
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
			// The resource quota controller computes quotas' usage, without
			// which the API server enforces none (the broker's per-member
			// quotas).
			"--controllers=" + c.controllers(),
			"--service-account-private-key-file=" + saKey,
			"--root-ca-file=" + caPath,
			// The node IPAM controller does not run (harness nodes come
			// with their pod CIDRs); the ranges are given for the
			// controllers that read them.
			"--service-cluster-ip-range=" + joinPrefixes(c.ServiceCIDRs),
			"--cluster-cidr=" + joinPrefixes(c.PodCIDRs),
			"--leader-elect=false",
			"--secure-port=0",
			"--kube-api-qps=200", "--kube-api-burst=400",
			"--v=1",
		},
	}
	if err := c.kcm.start(); err != nil {
		return err
	}
	if c.real {
		if err := c.startScheduler(); err != nil {
			return err
		}
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
	if c.gateway != nil {
		c.GatewayKubeconfigPath = filepath.Join(c.dir, "kubeconfig-gateway")
		viaGateway := rest.CopyConfig(admin)
		viaGateway.Host = c.GatewayServer()
		if err := c.WriteKubeconfig(c.GatewayKubeconfigPath, viaGateway); err != nil {
			return err
		}
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

// joinPrefixes is the comma-separated list the Kubernetes flags take.
func joinPrefixes(ps []netip.Prefix) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.String()
	}
	return strings.Join(s, ",")
}

func (c *Cluster) stop() {
	// The API server goes before its etcd: the other order can hang it.
	for _, p := range []*process{c.scheduler, c.kcm, c.apiserver, c.etcd} {
		if p != nil {
			p.stop()
		}
	}
}

// waitHTTP waits up to budget for url to answer 200 OK, and says in its
// error how far the process got: the last probe's result and its log tail.
func waitHTTP(ctx context.Context, url string, p *process, budget time.Duration) error {
	client := &http.Client{Timeout: 5 * time.Second}
	began := time.Now()
	probes, last := 0, "no probe answered"
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, budget, true, func(ctx context.Context) (bool, error) {
		if done, err := p.exited(); done {
			return false, fmt.Errorf("exited: %v", err)
		}
		probes++
		resp, err := client.Get(url)
		if err != nil {
			last = err.Error()
			return false, nil
		}
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		resp.Body.Close()
		last = fmt.Sprintf("HTTP %d %s", resp.StatusCode, strings.TrimSpace(string(body)))
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		return fmt.Errorf("%s not healthy after %v and %d probes of %s (last: %s): %w\n--- last lines of %s:\n%s",
			p.name, time.Since(began).Round(time.Millisecond), probes, url, last, err, p.logPath, p.tail(20))
	}
	return nil
}
