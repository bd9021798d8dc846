package realnode

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"text/template"
	"time"

	"github.com/miekg/dns"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/mcsd-io/mcsd/kubectlmcs/readiness"
	"github.com/mcsd-io/mcsd/test/lib/echopod"
	"github.com/mcsd-io/mcsd/test/lib/images"
)

// The names manifests/mcsd ships.
const (
	mcsdNamespace = "mcsd-system"
	// The node agents' DaemonSet and the controller's Deployment.
	nodeAgentDaemonSet   = "mcsd-node-agent"
	controllerDeployment = "mcsd-controller"
	controllerReplicas   = 2
	// mcsdSelector selects both kinds of pods.
	mcsdSelector       = "app.kubernetes.io/name=mcsd"
	nodeAgentSelector  = mcsdSelector + ",app.kubernetes.io/component=node-agent"
	controllerSelector = mcsdSelector + ",app.kubernetes.io/component=controller"
	mcsdDNS            = "mcsd-dns"
	// mcsdDNSPort is the node agent's DNS port on its node's address.
	mcsdDNSPort = 10271
)

// installBroker installs the broker as the README says.
func (w *world) installBroker(ctx context.Context) error {
	return w.installBrokerWith(ctx, w.binDir)
}

// installBrokerWith installs the broker with the kubectl-mcs of binDir.
func (w *world) installBrokerWith(ctx context.Context, binDir string) error {
	_, err := w.kubectlWith(ctx, binDir, "", "mcs", "broker", "install", "--broker-context", w.cs.Broker.Name)
	return err
}

// installMCSD joins a member as the README says, with nothing else: kubectl
// mcs join installs the CRDs and mcsd of img for the member, declares it
// on the broker with the broker's address as the member's nodes reach it,
// stores its broker credentials, points its CoreDNS at mcsd-dns and waits
// until mcsd has rolled out and every CoreDNS pod answers. Then it checks
// that the DaemonSet and the Deployment have rolled out img. Joining again
// with another image is the rolling update.
func (w *world) installMCSD(ctx context.Context, m *member, img images.Image) error {
	return w.joinWith(ctx, w.binDir, m, img)
}

// joinWith is installMCSD with the kubectl-mcs of binDir.
func (w *world) joinWith(ctx context.Context, binDir string, m *member, img images.Image) error {
	if _, err := w.kubectlWith(ctx, binDir, "", w.joinArgs(m, img)...); err != nil {
		return err
	}
	return w.awaitRollout(ctx, m, img.Ref)
}

// joinArgs are the README's kubectl mcs join of m with img, /metrics on
// the pods' addresses where a Prometheus scrapes them (docs/reference/
// metrics.md).
func (w *world) joinArgs(m *member, img images.Image) []string {
	return []string{"mcs", "join", "--broker-context", w.cs.Broker.Name, "--context", m.Name,
		"--pod-cidrs", m.PodCIDR.String(), "--broker-server", w.cs.Broker.GatewayServer(), "--image", img.Ref,
		"--set", "metrics.bindAddress=$(POD_IP)"}
}

// joinWatched is installMCSD while every CoreDNS pod of m is asked, each
// directly from its node, whether it answers for clusterset.local: join
// must return only once they all do. It logs how long join took and when
// the pods first all answered, both from when join began.
func (w *world) joinWatched(ctx context.Context, t *testing.T, m *member, img images.Image, args ...string) error {
	watch := watchClusterDNS(ctx, m)
	began := time.Now()
	out, err := w.kubectl(ctx, "", args...)
	took := time.Since(began)
	answered := watch.stop().Sub(began)
	if err != nil {
		return err
	}
	if err := clusterDNSAnswers(ctx, m); err != nil {
		return fmt.Errorf("%s: kubectl mcs join returned %v after it began, but not every CoreDNS pod answers for clusterset.local: %w\n%s", m.Name, took.Round(10*time.Millisecond), err, out)
	}
	t.Logf("%s: kubectl mcs join said:\n%s", m.Name, out)
	t.Logf("figure: %s: kubectl mcs join returned %v after it began; every CoreDNS pod answered for clusterset.local %v after it began (asked every 200 ms)",
		m.Name, took.Round(10*time.Millisecond), answered.Round(10*time.Millisecond))
	if answered < 0 || answered > took {
		return fmt.Errorf("%s: join returned %v after it began, but the CoreDNS pods first all answered at %v", m.Name, took, answered)
	}
	return w.awaitRollout(ctx, m, img.Ref)
}

// dnsWatch records when every CoreDNS pod of a member first answered for
// clusterset.local.
type dnsWatch struct {
	cancel context.CancelFunc
	done   chan time.Time
}

// watchClusterDNS asks every CoreDNS pod of m every 200 ms until stopped.
func watchClusterDNS(ctx context.Context, m *member) *dnsWatch {
	ctx, cancel := context.WithCancel(ctx)
	d := &dnsWatch{cancel: cancel, done: make(chan time.Time, 1)}
	go func() {
		var first time.Time
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			if first.IsZero() && clusterDNSAnswers(ctx, m) == nil {
				first = time.Now()
			}
			select {
			case <-ctx.Done():
				d.done <- first
				return
			case <-tick.C:
			}
		}
	}()
	return d
}

// stop ends the watch and returns when the pods first all answered (zero:
// never).
func (d *dnsWatch) stop() time.Time {
	d.cancel()
	return <-d.done
}

// clusterDNSAnswers asks every CoreDNS pod of m, from the network
// namespace of its node, over UDP, what kubectl mcs join asks it (the
// clusterset zone's schema version, which only mcsd answers), and says
// which did not answer.
func clusterDNSAnswers(ctx context.Context, m *member) error {
	pods, err := m.Kube.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: "k8s-app=kube-dns"})
	if err != nil {
		return err
	}
	asked := 0
	for _, p := range pods.Items {
		if p.DeletionTimestamp != nil {
			continue
		}
		asked++
		node, err := m.RealNode(p.Spec.NodeName)
		if err != nil || p.Status.PodIP == "" {
			return fmt.Errorf("pod %s: not running (%s)", p.Name, p.Status.Phase)
		}
		q := new(dns.Msg)
		q.SetQuestion(readiness.Question, dns.TypeTXT)
		var answer *dns.Msg
		err = node.NS.Do(func() error {
			var err error
			answer, _, err = (&dns.Client{Net: "udp", Timeout: time.Second}).Exchange(q, net.JoinHostPort(p.Status.PodIP, "53"))
			return err
		})
		if err == nil {
			err = readiness.Answered(answer)
		}
		if err != nil {
			return fmt.Errorf("pod %s at %s: %w", p.Name, p.Status.PodIP, err)
		}
	}
	if asked == 0 {
		return fmt.Errorf("no CoreDNS pod")
	}
	return nil
}

// crashLoop is how often an mcsd container may restart before a rollout
// is given up: it is not going to start.
const crashLoop = 3

// awaitRollout waits until the node agents' DaemonSet runs img on every
// node and the controller's Deployment in both replicas, each pod Ready.
func (w *world) awaitRollout(ctx context.Context, m *member, ref string) error {
	var last string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 10*time.Minute, true, func(ctx context.Context) (bool, error) {
		ds, err := m.Kube.AppsV1().DaemonSets(mcsdNamespace).Get(ctx, nodeAgentDaemonSet, metav1.GetOptions{})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		last = rolloutState(ds)
		if ds.Status.ObservedGeneration < ds.Generation || ds.Spec.Template.Spec.Containers[0].Image != ref {
			return false, nil
		}
		n := ds.Status.DesiredNumberScheduled
		if n != int32(len(m.RealNodes())) || ds.Status.UpdatedNumberScheduled != n || ds.Status.NumberReady != n || ds.Status.NumberAvailable != n {
			return false, nil
		}
		d, err := m.Kube.AppsV1().Deployments(mcsdNamespace).Get(ctx, controllerDeployment, metav1.GetOptions{})
		if err != nil {
			last += "; " + err.Error()
			return false, nil
		}
		s := d.Status
		last += fmt.Sprintf("; controller: generation %d observed %d, updated %d, ready %d, available %d", d.Generation, s.ObservedGeneration, s.UpdatedReplicas, s.ReadyReplicas, s.AvailableReplicas)
		if s.ObservedGeneration < d.Generation || d.Spec.Template.Spec.Containers[0].Image != ref || s.Replicas != controllerReplicas ||
			s.UpdatedReplicas != controllerReplicas || s.ReadyReplicas != controllerReplicas || s.AvailableReplicas != controllerReplicas {
			return false, nil
		}
		pods, err := m.Kube.CoreV1().Pods(mcsdNamespace).List(ctx, metav1.ListOptions{LabelSelector: mcsdSelector})
		if err != nil {
			return false, nil
		}
		ready := 0
		for _, p := range pods.Items {
			if p.DeletionTimestamp == nil && p.Spec.Containers[0].Image == ref && echopod.Ready(&p) {
				ready++
			}
			for _, cs := range p.Status.ContainerStatuses {
				if cs.RestartCount >= crashLoop {
					return false, fmt.Errorf("pod %s restarted %d times", p.Name, cs.RestartCount)
				}
			}
		}
		last += fmt.Sprintf(", %d of %d pods of %s Ready", ready, len(pods.Items), ref)
		return ready == len(pods.Items) && int32(ready) == n+controllerReplicas, nil
	})
	if err != nil {
		return fmt.Errorf("%s: mcsd's DaemonSet and Deployment did not roll out %s (%s): %w\n%s", m.Name, ref, last, err, w.podDiagnosis(ctx, m))
	}
	return nil
}

func rolloutState(ds *appsv1.DaemonSet) string {
	s := ds.Status
	return fmt.Sprintf("generation %d observed %d, desired %d, updated %d, ready %d, available %d",
		ds.Generation, s.ObservedGeneration, s.DesiredNumberScheduled, s.UpdatedNumberScheduled, s.NumberReady, s.NumberAvailable)
}

// podDiagnosis says what the member's mcsd pods are doing, for failures.
func (w *world) podDiagnosis(ctx context.Context, m *member) string {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var b strings.Builder
	pods, err := m.Kube.CoreV1().Pods(mcsdNamespace).List(ctx, metav1.ListOptions{LabelSelector: mcsdSelector})
	if err != nil {
		return err.Error()
	}
	for _, p := range pods.Items {
		fmt.Fprintf(&b, "pod %s on %s: %s ready=%v", p.Name, p.Spec.NodeName, p.Status.Phase, echopod.Ready(&p))
		for _, cs := range p.Status.ContainerStatuses {
			fmt.Fprintf(&b, " restarts=%d state=%+v", cs.RestartCount, cs.State)
		}
		logs, _ := m.Kube.CoreV1().Pods(mcsdNamespace).GetLogs(p.Name, &corev1.PodLogOptions{TailLines: ptrTo[int64](15)}).DoRaw(ctx)
		fmt.Fprintf(&b, "\n%s\n", logs)
	}
	return b.String()
}

func ptrTo[T any](v T) *T { return &v }

// coreDNS is the cluster DNS as kube-dns is commonly deployed: a
// Deployment of CoreDNS behind the Service the kubelets' clusterDNS names,
// its pods' CPU request, priority and probes as kubeadm ships them (a pod
// without a CPU request gets the smallest CPU weight, and a loaded node
// starves it), its Corefile the usual kubernetes block, to which kubectl
// mcs join adds the server block of clusterset.local. Nothing is forwarded upstream: no name outside the clusters resolves.
var coreDNS = template.Must(template.New("coredns").Parse(`apiVersion: v1
kind: ServiceAccount
metadata:
  name: coredns
  namespace: kube-system
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: system:coredns
rules:
- apiGroups: [""]
  resources: ["endpoints", "services", "pods", "namespaces"]
  verbs: ["list", "watch"]
- apiGroups: ["discovery.k8s.io"]
  resources: ["endpointslices"]
  verbs: ["list", "watch"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: system:coredns
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: system:coredns
subjects:
- kind: ServiceAccount
  name: coredns
  namespace: kube-system
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: coredns
  namespace: kube-system
data:
  Corefile: |
{{.Corefile}}
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: coredns
  namespace: kube-system
  labels:
    k8s-app: kube-dns
spec:
  replicas: 2
  selector:
    matchLabels:
      k8s-app: kube-dns
  template:
    metadata:
      labels:
        k8s-app: kube-dns
    spec:
      serviceAccountName: coredns
      priorityClassName: system-cluster-critical
      dnsPolicy: Default
      topologySpreadConstraints:
      - maxSkew: 1
        topologyKey: kubernetes.io/hostname
        whenUnsatisfiable: DoNotSchedule
        labelSelector:
          matchLabels:
            k8s-app: kube-dns
      containers:
      - name: coredns
        image: {{.Image}}
        args: ["-conf", "/etc/coredns/Corefile"]
        resources:
          requests: {cpu: 100m, memory: 70Mi}
          limits: {memory: 170Mi}
        ports:
        - {name: dns, containerPort: 53, protocol: UDP}
        - {name: dns-tcp, containerPort: 53, protocol: TCP}
        readinessProbe:
          httpGet: {path: /ready, port: 8181}
          periodSeconds: 2
        livenessProbe:
          httpGet: {path: /health, port: 8080}
          initialDelaySeconds: 60
          timeoutSeconds: 5
          failureThreshold: 5
        volumeMounts:
        - {name: config, mountPath: /etc/coredns, readOnly: true}
      volumes:
      - name: config
        configMap:
          name: coredns
---
apiVersion: v1
kind: Service
metadata:
  name: kube-dns
  namespace: kube-system
  labels:
    k8s-app: kube-dns
spec:
  clusterIP: {{.ClusterIP}}
  selector:
    k8s-app: kube-dns
  ports:
  - {name: dns, port: 53, protocol: UDP}
  - {name: dns-tcp, port: 53, protocol: TCP}
`))

// corefileMain is the Corefile's block for cluster.local, as kubeadm
// writes it, without forwarding to an upstream resolver.
const corefileMain = `.:53 {
    errors
    health {
        lameduck 5s
    }
    ready
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
    }
    cache 30
    loop
    reload
    loadbalance
}
`

// installCoreDNS deploys the cluster DNS, as the cluster has it before
// mcsd, and waits until its pods are Ready.
func (w *world) installCoreDNS(ctx context.Context, m *member) error {
	var corefile strings.Builder
	for _, line := range strings.Split(strings.TrimRight(corefileMain, "\n"), "\n") {
		corefile.WriteString("    " + line + "\n")
	}
	var b strings.Builder
	if err := coreDNS.Execute(&b, map[string]string{
		"Corefile":  strings.TrimRight(corefile.String(), "\n"),
		"Image":     w.coredns.Ref,
		"ClusterIP": m.DNSServiceIP(),
	}); err != nil {
		return err
	}
	file := filepath.Join(w.dir, m.Name+"-coredns.yaml")
	if err := os.WriteFile(file, []byte(b.String()), 0o644); err != nil {
		return err
	}
	if _, err := w.kubectl(ctx, "", "--context", m.Name, "apply", "-f", file); err != nil {
		return err
	}
	var last string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		d, err := m.Kube.AppsV1().Deployments("kube-system").Get(ctx, "coredns", metav1.GetOptions{})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		last = fmt.Sprintf("%d of %d replicas ready", d.Status.ReadyReplicas, *d.Spec.Replicas)
		return d.Status.ReadyReplicas == *d.Spec.Replicas, nil
	})
	if err != nil {
		return fmt.Errorf("%s: CoreDNS not ready (%s): %w", m.Name, last, err)
	}
	return nil
}
