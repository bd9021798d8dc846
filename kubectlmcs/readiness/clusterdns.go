package readiness

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	mcsddns "github.com/mcsd-io/mcsd/dns"
	"github.com/mcsd-io/mcsd/kubectlmcs/install"
)

// Question is what each cluster DNS pod is asked: the MCS DNS schema
// version, dns-version.clusterset.local TXT, which only mcsd answers. An
// unknown clusterset name would not do: where the Corefile forwards "."
// upstream, the upstream answers it NXDOMAIN as mcsd would.
var Question = "dns-version." + mcsddns.DefaultZone

// The cluster DNS as every distribution deploys it: Service kube-dns in
// kube-system, CoreDNS or not, its pods labelled k8s-app=kube-dns.
const (
	clusterDNSService  = "kube-dns"
	clusterDNSSelector = "k8s-app=kube-dns"
	// restartedAtAnnotation is what kubectl rollout restart sets on the
	// pod template.
	restartedAtAnnotation = "kubectl.kubernetes.io/restartedAt"
	// askTimeout bounds one question to one pod.
	askTimeout = 5 * time.Second
)

// ClusterDNS is the member's cluster DNS: the pods of Service
// kube-system/kube-dns, asked one by one whether they answer for
// clusterset.local, and the Deployment that runs them, which Restart
// restarts.
type ClusterDNS struct {
	kube     kubernetes.Interface
	cfg      *rest.Config
	selector labels.Selector
	// deployment runs the pods; "" when no Deployment of kube-system does.
	deployment string

	mu sync.Mutex
	// restarted is set once Restart has run: the pods that answer must
	// then be the restarted ones.
	restarted bool
	// reached says the last check reached a pod: a pod that was never
	// reached tells nothing a restart would change.
	reached bool
}

// FindClusterDNS finds the member's cluster DNS pods and their Deployment.
func FindClusterDNS(ctx context.Context, cfg *rest.Config, kube kubernetes.Interface) (*ClusterDNS, error) {
	c := &ClusterDNS{kube: kube, cfg: cfg}
	svc, err := kube.CoreV1().Services(metav1.NamespaceSystem).Get(ctx, clusterDNSService, metav1.GetOptions{})
	switch {
	case err == nil && len(svc.Spec.Selector) > 0:
		c.selector = labels.SelectorFromSet(svc.Spec.Selector)
	case err == nil || apierrors.IsNotFound(err):
		c.selector, _ = labels.Parse(clusterDNSSelector)
	default:
		return nil, fmt.Errorf("reading Service %s/%s: %w", metav1.NamespaceSystem, clusterDNSService, err)
	}
	deployments, err := kube.AppsV1().Deployments(metav1.NamespaceSystem).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing the Deployments of %s: %w", metav1.NamespaceSystem, err)
	}
	for _, d := range deployments.Items {
		if c.selector.Matches(labels.Set(d.Spec.Template.Labels)) {
			c.deployment = d.Name
			break
		}
	}
	return c, nil
}

// Deployment names the Deployment that runs the cluster DNS, "" when none
// does.
func (c *ClusterDNS) Deployment() string { return c.deployment }

// PodAnswer is how one cluster DNS pod answered.
type PodAnswer struct {
	Pod string
	// Err says why it did not answer for clusterset.local; nil when it
	// did.
	Err error
}

// Tally judges the answers of the cluster DNS pods: done when there is
// one at least and each answered.
func Tally(answers []PodAnswer) Observation {
	ok := 0
	var why []string
	for _, a := range answers {
		if a.Err == nil {
			ok++
			continue
		}
		why = append(why, a.Pod+": "+a.Err.Error())
	}
	o := Observation{Count: fmt.Sprintf("%d/%d pods", ok, len(answers)), Done: ok == len(answers) && ok > 0}
	switch {
	case len(answers) == 0:
		o.Seen = "no pod of the cluster DNS (Service " + metav1.NamespaceSystem + "/" + clusterDNSService + ") runs"
	case !o.Done:
		o.Seen = fmt.Sprintf("%d of %d pods answer; %s", ok, len(answers), strings.Join(why, "; "))
	}
	return o
}

// Answered says whether answer is mcsd's to Question: NOERROR with a TXT
// record; otherwise why not.
func Answered(answer *dns.Msg) error {
	if answer.Rcode != dns.RcodeSuccess {
		return fmt.Errorf("%s for %s (the Corefile without mcsd's block, or mcsd not answering)", dns.RcodeToString[answer.Rcode], Question)
	}
	for _, rr := range answer.Answer {
		if _, ok := rr.(*dns.TXT); ok {
			return nil
		}
	}
	return fmt.Errorf("no TXT record for %s", Question)
}

// Answers is the check that every pod of the cluster DNS answers for
// clusterset.local, each asked itself. After Restart it also waits until
// the restart has rolled out, so that the pods asked are the restarted
// ones.
func (c *ClusterDNS) Answers(ctx context.Context) (Observation, error) {
	c.mu.Lock()
	restarted := c.restarted
	c.mu.Unlock()
	if restarted {
		if o, err := c.rollout(ctx); err != nil || !o.Done {
			o.Seen = "restarting the cluster DNS: " + o.Seen
			return o, err
		}
	}
	list, err := c.kube.CoreV1().Pods(metav1.NamespaceSystem).List(ctx, metav1.ListOptions{LabelSelector: c.selector.String()})
	if err != nil {
		return Observation{Seen: fmt.Sprintf("listing the cluster DNS pods: %v", err)}, nil
	}
	var pods []*corev1.Pod
	for i := range list.Items {
		// A pod on its way out is no longer asked by clients.
		if list.Items[i].DeletionTimestamp == nil {
			pods = append(pods, &list.Items[i])
		}
	}
	answers := make([]PodAnswer, len(pods))
	var wg sync.WaitGroup
	for i, p := range pods {
		answers[i].Pod = p.Name
		if p.Status.Phase != corev1.PodRunning {
			answers[i].Err = fmt.Errorf("pod %s", strings.ToLower(string(p.Status.Phase)))
			continue
		}
		wg.Go(func() { answers[i].Err = c.ask(ctx, p) })
	}
	wg.Wait()
	reached := slices.ContainsFunc(answers, func(a PodAnswer) bool { return !errors.Is(a.Err, errUnreachable) })
	c.mu.Lock()
	c.reached = reached
	c.mu.Unlock()
	return Tally(answers), nil
}

func (c *ClusterDNS) ask(ctx context.Context, pod *corev1.Pod) error {
	ctx, cancel := context.WithTimeout(ctx, askTimeout)
	defer cancel()
	query := new(dns.Msg)
	query.SetQuestion(Question, dns.TypeTXT)
	answer, err := askPod(ctx, c.cfg, c.kube, pod, query)
	if err != nil {
		return err
	}
	return Answered(answer)
}

// Reached says whether the last check reached a pod of the cluster DNS:
// when none could be asked at all (the API server refused the
// port-forward), a restart would change nothing.
func (c *ClusterDNS) Reached() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.reached
}

// rollout is the rollout of the cluster DNS's Deployment.
func (c *ClusterDNS) rollout(ctx context.Context) (Observation, error) {
	return Deployment(c.kube, metav1.NamespaceSystem, c.deployment)(ctx)
}

// Restart restarts the cluster DNS as kubectl rollout restart does (the
// restartedAt annotation of the pod template), so that its pods start
// with the Corefile as it is now instead of waiting for the kubelet to
// update their ConfigMap volume and the reload plugin to notice. It says
// what it did, or why it did nothing: no Deployment to restart.
func (c *ClusterDNS) Restart(ctx context.Context, now time.Time) (string, error) {
	if c.deployment == "" {
		return "no Deployment of " + metav1.NamespaceSystem + " runs the cluster DNS pods: not restarting them, waiting for their reload", nil
	}
	patch := fmt.Sprintf(`{"spec":{"template":{"metadata":{"annotations":{%q:%q}}}}}`, restartedAtAnnotation, now.Format(time.RFC3339))
	_, err := c.kube.AppsV1().Deployments(metav1.NamespaceSystem).Patch(ctx, c.deployment, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{FieldManager: install.FieldManager})
	if err != nil {
		return "", fmt.Errorf("restarting Deployment %s/%s: %w", metav1.NamespaceSystem, c.deployment, err)
	}
	c.mu.Lock()
	c.restarted = true
	c.mu.Unlock()
	return fmt.Sprintf("restarted the cluster DNS (Deployment %s/%s, as kubectl rollout restart does), so that its pods read the Corefile now", metav1.NamespaceSystem, c.deployment), nil
}
