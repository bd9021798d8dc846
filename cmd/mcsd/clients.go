package main

import (
	"context"
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/flowcontrol"
	mcsclient "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned"
)

// clients talk to one API server: the local cluster or the broker.
type clients struct {
	config  *rest.Config
	kube    kubernetes.Interface
	mcs     mcsclient.Interface
	dynamic dynamic.Interface
}

const userAgent = "mcsd"

// newClients returns clients with a rate limiter of their own: each
// component gets its own, so that a burst of one (the exporter writing
// thousands of records) never delays another (the heartbeat renewing its
// Lease, or the importer publishing that a cluster is gone). Built-in
// types travel as protobuf, which costs the API server and mcsd several
// times less CPU than JSON at tens of thousands of objects; the MCS types
// are CRDs, which only speak JSON.
func newClients(cfg *rest.Config, qps float64, burst int) (*clients, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = float32(qps), burst
	cfg.UserAgent = rest.DefaultKubernetesUserAgent() + " " + userAgent
	// config, without the limiter, is what further clients are made from.
	c := &clients{config: rest.CopyConfig(cfg)}
	// One limiter shared by the three clientsets.
	cfg.RateLimiter = flowcontrol.NewTokenBucketRateLimiter(cfg.QPS, cfg.Burst)
	protoCfg := rest.CopyConfig(cfg)
	protoCfg.ContentType = runtime.ContentTypeProtobuf
	protoCfg.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	var err error
	if c.kube, err = kubernetes.NewForConfig(protoCfg); err != nil {
		return nil, err
	}
	if c.mcs, err = mcsclient.NewForConfig(cfg); err != nil {
		return nil, err
	}
	if c.dynamic, err = dynamic.NewForConfig(cfg); err != nil {
		return nil, err
	}
	return c, nil
}

// localConfig is the local cluster's configuration: --kubeconfig, or the
// in-cluster one.
func localConfig(o *options) (*rest.Config, error) {
	if o.kubeconfig != "" {
		cfg, err := clientcmd.BuildConfigFromFlags("", o.kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("--kubeconfig: %w", err)
		}
		return cfg, nil
	}
	cfg, err := rest.InClusterConfig()
	if err != nil {
		return nil, fmt.Errorf("no --kubeconfig and not running in a cluster: %w", err)
	}
	return cfg, nil
}

// brokerConfig is the broker's configuration: --broker-kubeconfig, or the
// kubeconfig held in the --broker-secret Secret of the local cluster.
func brokerConfig(ctx context.Context, o *options, local kubernetes.Interface) (*rest.Config, error) {
	if o.brokerKubeconfig != "" {
		cfg, err := clientcmd.BuildConfigFromFlags("", o.brokerKubeconfig)
		if err != nil {
			return nil, fmt.Errorf("--broker-kubeconfig: %w", err)
		}
		return cfg, nil
	}
	namespace, name, _ := strings.Cut(o.brokerSecret, "/")
	secret, err := local.CoreV1().Secrets(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("--broker-secret: reading Secret %s/%s: %w", namespace, name, err)
	}
	data, ok := secret.Data[brokerSecretKey]
	if !ok {
		return nil, fmt.Errorf("--broker-secret: Secret %s/%s has no key %q holding the broker kubeconfig", namespace, name, brokerSecretKey)
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(data)
	if err != nil {
		return nil, fmt.Errorf("--broker-secret: Secret %s/%s key %q: %w", namespace, name, brokerSecretKey, err)
	}
	return cfg, nil
}

// brokerSecretKey is the key of the broker kubeconfig in --broker-secret.
const brokerSecretKey = "kubeconfig"
