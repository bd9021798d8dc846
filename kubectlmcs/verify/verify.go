// Package verify proves the data path of a clusterset end to end, as
// kubectl mcs verify runs it: a probe Service in each member, exported; a
// pod in every member that resolves every other member's probe through the
// cluster DNS and connects to it; a matrix of the outcomes with the
// resolve and connect latencies; and everything removed afterwards. The
// probe and the check run mcsd's own image (mcsd probe serve|check), which
// every member already runs, so verify needs no other image. It changes
// nothing outside the namespace it creates in each member.
package verify

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
	mcsclient "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned"
)

// Defaults of Options.
const (
	DefaultNamespace = "mcsd-verify"
	DefaultPort      = 8080
)

// Member is one member cluster to verify.
type Member struct {
	// Name says which cluster it is in the matrix (a kubeconfig context).
	Name string
	// ID is its cluster ID, which its probe names in its reply.
	ID   string
	Kube kubernetes.Interface
	MCS  mcsclient.Interface
}

// Options of Run.
type Options struct {
	// Image runs the probe and the check: mcsd's image.
	Image string
	// Namespace is created in every member and deleted afterwards
	// (default DefaultNamespace); it must not exist.
	Namespace string
	// Port the probe listens on (default DefaultPort).
	Port int32
	// Timeout bounds each step: the probes Ready, the checks done (an
	// export takes seconds to be imported and resolvable), the cleanup.
	Timeout time.Duration
	// Keep leaves what Run made, to look at it.
	Keep bool
	// Progress, when set, is told what Run does.
	Progress func(format string, args ...any)
}

// Cell is the check of one member's probe from another member.
type Cell struct {
	From, To string
	Result
}

// Run verifies the members: every member's probe from every other member.
// It returns the matrix even when checks fail; an error says Run could not
// check (or clean up).
func Run(ctx context.Context, members []Member, opts Options) (cells []Cell, err error) {
	opts = opts.withDefaults()
	if len(members) < 2 {
		return nil, fmt.Errorf("verify needs two members at least, got %d", len(members))
	}
	if !opts.Keep {
		defer func() {
			if cerr := cleanup(context.WithoutCancel(ctx), members, opts); cerr != nil && err == nil {
				err = cerr
			}
		}()
	}
	for _, m := range members {
		opts.Progress("%s: deploying the probe %s/%s and exporting it", m.Name, opts.Namespace, ServiceName(m.ID))
		if err := deploy(ctx, m, opts); err != nil {
			return nil, fmt.Errorf("%s: %w", m.Name, err)
		}
	}
	for _, m := range members {
		if err := waitReady(ctx, m, opts, probePod); err != nil {
			return nil, fmt.Errorf("%s: the probe: %w", m.Name, err)
		}
	}
	for _, from := range members {
		var targets []string
		for _, to := range members {
			if to.ID != from.ID {
				targets = append(targets, Target(to.ID, opts))
			}
		}
		opts.Progress("%s: checking %d probes from a pod", from.Name, len(targets))
		if err := startCheck(ctx, from, members, targets, opts); err != nil {
			return nil, fmt.Errorf("%s: %w", from.Name, err)
		}
	}
	for _, from := range members {
		results, err := checkResults(ctx, from, opts)
		if err != nil {
			return cells, fmt.Errorf("%s: %w", from.Name, err)
		}
		for _, to := range members {
			if to.ID == from.ID {
				continue
			}
			r, ok := results[Target(to.ID, opts)]
			if !ok {
				r = Result{Target: Target(to.ID, opts), Error: errNoResult.Error()}
			}
			cells = append(cells, Cell{From: from.Name, To: to.Name, Result: r})
		}
	}
	return cells, nil
}

func (o Options) withDefaults() Options {
	if o.Namespace == "" {
		o.Namespace = DefaultNamespace
	}
	if o.Port == 0 {
		o.Port = DefaultPort
	}
	if o.Timeout == 0 {
		o.Timeout = 2 * time.Minute
	}
	if o.Progress == nil {
		o.Progress = func(string, ...any) {}
	}
	return o
}

// ServiceName is the probe Service of the member cluster id.
func ServiceName(id string) string { return "probe-" + id }

// Target is the name and port a check asks for the probe of cluster id.
func Target(id string, opts Options) string {
	return fmt.Sprintf("%s.%s.svc.clusterset.local:%d", ServiceName(id), opts.Namespace, opts.Port)
}

// The pods Run makes, by name, and their label.
const (
	probePod  = "probe"
	checkPod  = "check"
	labelRole = "mcsd.io/verify"
)

func deploy(ctx context.Context, m Member, opts Options) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: opts.Namespace, Labels: map[string]string{labelRole: "namespace"}}}
	if _, err := m.Kube.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		if apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("namespace %s exists already (another verify, or one kept with --keep): delete it, or choose another --namespace", opts.Namespace)
		}
		return fmt.Errorf("creating namespace %s: %w", opts.Namespace, err)
	}
	pod := podSpec(probePod, opts, []string{"probe", "serve", fmt.Sprintf("--listen=:%d", opts.Port), "--identity=" + m.ID})
	pod.Spec.RestartPolicy = corev1.RestartPolicyAlways
	pod.Spec.Containers[0].ReadinessProbe = &corev1.Probe{
		ProbeHandler:  corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(opts.Port)}},
		PeriodSeconds: 1,
	}
	if _, err := m.Kube.CoreV1().Pods(opts.Namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating the probe pod: %w", err)
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: ServiceName(m.ID), Namespace: opts.Namespace},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{labelRole: probePod},
			Ports:    []corev1.ServicePort{{Name: "probe", Port: opts.Port, TargetPort: intstr.FromInt32(opts.Port), Protocol: corev1.ProtocolTCP}},
		},
	}
	if _, err := m.Kube.CoreV1().Services(opts.Namespace).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating the probe Service: %w", err)
	}
	export := &mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Name: svc.Name, Namespace: opts.Namespace}}
	if _, err := m.MCS.MulticlusterV1beta1().ServiceExports(opts.Namespace).Create(ctx, export, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("exporting the probe Service: %w", err)
	}
	return nil
}

// podSpec is a pod of mcsd's image running args.
func podSpec(name string, opts Options, args []string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: opts.Namespace, Labels: map[string]string{labelRole: name}},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{
				Name: name, Image: opts.Image, Args: args,
				Env: []corev1.EnvVar{{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}},
				SecurityContext: &corev1.SecurityContext{
					AllowPrivilegeEscalation: ptr.To(false),
					Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
				},
			}},
			TerminationGracePeriodSeconds: ptr.To[int64](1),
		},
	}
}

func startCheck(ctx context.Context, from Member, members []Member, targets []string, opts Options) error {
	args := []string{"probe", "check", "--timeout=" + opts.Timeout.String()}
	for _, to := range members {
		if to.ID != from.ID {
			args = append(args, "--expect="+Target(to.ID, opts)+"="+to.ID)
		}
	}
	pod := podSpec(checkPod, opts, append(args, targets...))
	pod.Spec.RestartPolicy = corev1.RestartPolicyNever
	if _, err := from.Kube.CoreV1().Pods(opts.Namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating the check pod: %w", err)
	}
	return nil
}

// waitReady waits until the pod name is Ready.
func waitReady(ctx context.Context, m Member, opts Options, name string) error {
	var last string
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, opts.Timeout, true, func(ctx context.Context) (bool, error) {
		p, err := m.Kube.CoreV1().Pods(opts.Namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		last = podState(p)
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("pod %s/%s not Ready within %v: %s", opts.Namespace, name, opts.Timeout, last)
	}
	return nil
}

// podState says why a pod is not running, for errors.
func podState(p *corev1.Pod) string {
	s := string(p.Status.Phase)
	for _, c := range p.Status.ContainerStatuses {
		if w := c.State.Waiting; w != nil {
			s += fmt.Sprintf(" (%s: %s)", w.Reason, w.Message)
		}
	}
	return s
}

// checkResults waits for the check pod of m to finish and reads its
// results, one JSON line per target, by target.
func checkResults(ctx context.Context, m Member, opts Options) (map[string]Result, error) {
	var last string
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 2*opts.Timeout, true, func(ctx context.Context) (bool, error) {
		p, err := m.Kube.CoreV1().Pods(opts.Namespace).Get(ctx, checkPod, metav1.GetOptions{})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		last = podState(p)
		return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed, nil
	})
	if err != nil {
		return nil, fmt.Errorf("the check pod %s/%s did not finish within %v: %s", opts.Namespace, checkPod, 2*opts.Timeout, last)
	}
	logs, err := m.Kube.CoreV1().Pods(opts.Namespace).GetLogs(checkPod, &corev1.PodLogOptions{}).Stream(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading the check pod's log: %w", err)
	}
	defer logs.Close()
	return ParseResults(logs)
}

// ParseResults reads the results a check prints, one JSON object a line;
// other lines are ignored.
func ParseResults(r io.Reader) (map[string]Result, error) {
	out := map[string]Result{}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if !strings.HasPrefix(line, "{") {
			continue
		}
		var res Result
		if err := json.Unmarshal([]byte(line), &res); err != nil {
			return out, fmt.Errorf("a check result that is not one: %q: %w", line, err)
		}
		out[res.Target] = res
	}
	return out, sc.Err()
}

// cleanup deletes the namespace in every member and waits until it is
// gone.
func cleanup(ctx context.Context, members []Member, opts Options) error {
	var errs []string
	for _, m := range members {
		err := m.Kube.CoreV1().Namespaces().Delete(ctx, opts.Namespace, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Sprintf("%s: deleting namespace %s: %v", m.Name, opts.Namespace, err))
		}
	}
	for _, m := range members {
		opts.Progress("%s: removing namespace %s", m.Name, opts.Namespace)
		err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, opts.Timeout, true, func(ctx context.Context) (bool, error) {
			_, err := m.Kube.CoreV1().Namespaces().Get(ctx, opts.Namespace, metav1.GetOptions{})
			return apierrors.IsNotFound(err), nil
		})
		if err != nil {
			errs = append(errs, fmt.Sprintf("%s: namespace %s still there after %v", m.Name, opts.Namespace, opts.Timeout))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("cleaning up: %s", strings.Join(errs, "; "))
	}
	return nil
}

// PrintMatrix writes cells as a matrix: a row per member checking, a
// column per member checked, each cell PASS with the resolve and connect
// latencies, or FAIL; then why each failure failed.
func PrintMatrix(w io.Writer, names []string, cells []Cell) {
	byPair := map[[2]string]Cell{}
	for _, c := range cells {
		byPair[[2]string{c.From, c.To}] = c
	}
	fmt.Fprintf(w, "%s", "FROM \\ TO")
	for _, to := range names {
		fmt.Fprintf(w, "\t%s", to)
	}
	fmt.Fprintln(w)
	var failures []string
	for _, from := range names {
		fmt.Fprint(w, from)
		for _, to := range names {
			c, ok := byPair[[2]string{from, to}]
			switch {
			case from == to:
				fmt.Fprint(w, "\t-")
			case !ok:
				fmt.Fprint(w, "\tFAIL")
			case c.OK():
				fmt.Fprintf(w, "\tPASS resolve %.1fms connect %.1fms", c.ResolveMS, c.ConnectMS)
			default:
				fmt.Fprint(w, "\tFAIL")
				failures = append(failures, fmt.Sprintf("%s -> %s: %s (%d attempts)", from, to, c.Error, c.Attempts))
			}
		}
		fmt.Fprintln(w)
	}
	for _, f := range failures {
		fmt.Fprintln(w, f)
	}
}

// MCSDImage is the image of the mcsd container that a DaemonSet or
// Deployment of namespace (mcsd's) runs: the image verify's pods need.
func MCSDImage(ctx context.Context, kube kubernetes.Interface, namespace string) (string, error) {
	var specs []corev1.PodSpec
	dss, err := kube.AppsV1().DaemonSets(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return "", fmt.Errorf("listing DaemonSets of %s: %w", namespace, err)
	}
	for _, d := range dss.Items {
		specs = append(specs, d.Spec.Template.Spec)
	}
	deps, err := kube.AppsV1().Deployments(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return "", fmt.Errorf("listing Deployments of %s: %w", namespace, err)
	}
	for _, d := range deps.Items {
		specs = append(specs, d.Spec.Template.Spec)
	}
	for _, s := range specs {
		for _, c := range s.Containers {
			if c.Name == "mcsd" {
				return c.Image, nil
			}
		}
	}
	return "", fmt.Errorf("no container named mcsd in the DaemonSets and Deployments of %s: is mcsd installed? Or give its image", namespace)
}
