package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/miekg/dns"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	mcsddns "github.com/mcsd-io/mcsd/dns"
)

// installProbe checks an installation of mcsd from inside its cluster, as
// the chart's helm test does: every node agent the DaemonSet schedules
// answers /readyz and /livez on its health port and the zone's SOA on its
// DNS port (UDP and TCP), the DNS Service answers it on each of its
// ClusterIPs, and every controller replica answers /readyz. It reads the
// ports, the zone and the pods' selectors from the workloads themselves,
// so that it checks whatever the chart's values made of them.
type installProbe struct {
	kube      kubernetes.Interface
	namespace string
	// The names of the node agents' DaemonSet, the controller's Deployment
	// and the DNS Service.
	nodeAgents, controller, dnsService string
	http                               *http.Client
	// try bounds one DNS exchange.
	try time.Duration
}

// finding is the outcome of checking one thing: nil err is a pass.
type finding struct {
	subject string
	passed  string
	err     error
}

func (f finding) String() string {
	if f.err != nil {
		return fmt.Sprintf("FAIL %s: %v", f.subject, f.err)
	}
	return fmt.Sprintf("ok   %s: %s", f.subject, f.passed)
}

// run checks until everything passes or ctx ends, trying again every
// interval, and writes the findings of the last round to out; it says
// whether everything passed.
func (p *installProbe) run(ctx context.Context, out io.Writer, interval time.Duration) bool {
	findings := p.round(ctx)
	for !passed(findings) && ctx.Err() == nil {
		select {
		case <-ctx.Done():
		case <-time.After(interval):
			// A round that ctx cuts short says only that: the one
			// before it says more.
			if next := p.round(ctx); ctx.Err() == nil {
				findings = next
			}
		}
	}
	for _, f := range findings {
		fmt.Fprintln(out, f)
	}
	return passed(findings)
}

func passed(findings []finding) bool {
	for _, f := range findings {
		if f.err != nil {
			return false
		}
	}
	return len(findings) > 0
}

// round checks everything once.
func (p *installProbe) round(ctx context.Context) []finding {
	ds, err := p.kube.AppsV1().DaemonSets(p.namespace).Get(ctx, p.nodeAgents, metav1.GetOptions{})
	if err != nil {
		return []finding{{subject: "DaemonSet " + p.namespace + "/" + p.nodeAgents, err: err}}
	}
	agent, err := mcsdContainer(ds.Spec.Template.Spec)
	if err != nil {
		return []finding{{subject: "DaemonSet " + ds.Name, err: err}}
	}
	zone := zoneOf(agent.Args)
	findings := p.nodeAgentFindings(ctx, ds, agent, zone)
	findings = append(findings, p.serviceFindings(ctx, zone)...)
	return append(findings, p.controllerFindings(ctx)...)
}

// nodeAgentFindings checks every node agent the DaemonSet schedules.
func (p *installProbe) nodeAgentFindings(ctx context.Context, ds *appsv1.DaemonSet, agent *corev1.Container, zone string) []finding {
	subject := "DaemonSet " + ds.Name
	health, errH := portNamed(agent, "health")
	dnsPort, errD := portNamed(agent, "dns")
	if errH != nil || errD != nil {
		return []finding{{subject: subject, err: fmt.Errorf("%v %v", errH, errD)}}
	}
	pods, err := p.podsOf(ctx, ds.Spec.Selector)
	if err != nil {
		return []finding{{subject: subject, err: err}}
	}
	var findings []finding
	if want := int(ds.Status.DesiredNumberScheduled); len(pods) < want || want == 0 {
		findings = append(findings, finding{subject: subject, err: fmt.Errorf("%d node agent pods, %d scheduled", len(pods), want)})
	}
	for _, pod := range pods {
		f := finding{subject: fmt.Sprintf("node agent %s on %s (%s)", pod.Name, pod.Spec.NodeName, pod.Status.PodIP)}
		f.err = p.checkHealth(ctx, pod.Status.PodIP, health, "/readyz", "/livez")
		if f.err == nil {
			f.err = p.checkDNS(ctx, pod.Status.PodIP, dnsPort, zone)
		}
		f.passed = "/readyz, /livez, the SOA of " + zone + " over UDP and TCP"
		findings = append(findings, f)
	}
	return findings
}

// serviceFindings checks the DNS Service on each of its ClusterIPs: the
// address the cluster's DNS forwards the zone to.
func (p *installProbe) serviceFindings(ctx context.Context, zone string) []finding {
	subject := "Service " + p.dnsService
	svc, err := p.kube.CoreV1().Services(p.namespace).Get(ctx, p.dnsService, metav1.GetOptions{})
	if err != nil {
		return []finding{{subject: subject, err: err}}
	}
	var port int32
	for _, sp := range svc.Spec.Ports {
		if sp.Protocol == corev1.ProtocolUDP || sp.Protocol == "" {
			port = sp.Port
			break
		}
	}
	ips := svc.Spec.ClusterIPs
	if port == 0 || len(ips) == 0 || ips[0] == corev1.ClusterIPNone {
		return []finding{{subject: subject, err: fmt.Errorf("no UDP port on a ClusterIP (clusterIPs %v, ports %v)", ips, svc.Spec.Ports)}}
	}
	var findings []finding
	for _, ip := range ips {
		findings = append(findings, finding{
			subject: fmt.Sprintf("%s at %s", subject, net.JoinHostPort(ip, strconv.Itoa(int(port)))),
			passed:  "the SOA of " + zone + " over UDP and TCP",
			err:     p.checkDNS(ctx, ip, port, zone),
		})
	}
	return findings
}

// controllerFindings checks every replica of the controller: each is
// ready, the leader with its caches synced.
func (p *installProbe) controllerFindings(ctx context.Context) []finding {
	subject := "Deployment " + p.controller
	d, err := p.kube.AppsV1().Deployments(p.namespace).Get(ctx, p.controller, metav1.GetOptions{})
	if err != nil {
		return []finding{{subject: subject, err: err}}
	}
	c, err := mcsdContainer(d.Spec.Template.Spec)
	if err != nil {
		return []finding{{subject: subject, err: err}}
	}
	health, err := portNamed(c, "health")
	if err != nil {
		return []finding{{subject: subject, err: err}}
	}
	pods, err := p.podsOf(ctx, d.Spec.Selector)
	if err != nil {
		return []finding{{subject: subject, err: err}}
	}
	var findings []finding
	if d.Spec.Replicas != nil && *d.Spec.Replicas > 0 && len(pods) == 0 {
		findings = append(findings, finding{subject: subject, err: fmt.Errorf("none of its %d replicas running", *d.Spec.Replicas)})
	}
	for _, pod := range pods {
		findings = append(findings, finding{
			subject: fmt.Sprintf("controller %s on %s (%s)", pod.Name, pod.Spec.NodeName, pod.Status.PodIP),
			passed:  "/readyz",
			err:     p.checkHealth(ctx, pod.Status.PodIP, health, "/readyz"),
		})
	}
	return findings
}

// podsOf lists the pods of a workload's selector that are not on their
// way out, in name order.
func (p *installProbe) podsOf(ctx context.Context, selector *metav1.LabelSelector) ([]corev1.Pod, error) {
	sel, err := metav1.LabelSelectorAsSelector(selector)
	if err != nil {
		return nil, err
	}
	list, err := p.kube.CoreV1().Pods(p.namespace).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
	if err != nil {
		return nil, err
	}
	var pods []corev1.Pod
	for _, pod := range list.Items {
		if pod.DeletionTimestamp == nil && pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed {
			pods = append(pods, pod)
		}
	}
	slices.SortFunc(pods, func(a, b corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	return pods, nil
}

// checkHealth GETs each path on ip:port and wants 200; a failure names
// the checks that failed and why (the endpoint of each, /readyz/NAME,
// says; ?verbose only names them).
func (p *installProbe) checkHealth(ctx context.Context, ip string, port int32, paths ...string) error {
	if ip == "" {
		return fmt.Errorf("no address yet")
	}
	base := "http://" + net.JoinHostPort(ip, strconv.Itoa(int(port)))
	for _, path := range paths {
		code, body, err := p.get(ctx, base+path+"?verbose")
		if err != nil {
			return fmt.Errorf("GET %s: %w", path, err)
		}
		if code == http.StatusOK {
			continue
		}
		var failed []string
		for line := range strings.SplitSeq(body, "\n") {
			name, ok := strings.CutSuffix(strings.TrimPrefix(line, "[-]"), " failed: reason withheld")
			if !ok || !strings.HasPrefix(line, "[-]") {
				continue
			}
			why := "failed"
			if _, reason, err := p.get(ctx, base+path+"/"+name); err == nil {
				why = strings.TrimSpace(strings.TrimPrefix(reason, "internal server error: "))
			}
			failed = append(failed, name+": "+why)
		}
		if len(failed) == 0 {
			failed = []string{strings.TrimSpace(body)}
		}
		return fmt.Errorf("GET %s: %d: %s", path, code, strings.Join(failed, "; "))
	}
	return nil
}

// get GETs url and returns the status and (the start of) the body.
func (p *installProbe) get(ctx context.Context, url string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := p.http.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	return resp.StatusCode, string(body), err
}

// checkDNS asks ip:port for the SOA of zone over UDP and over TCP and
// wants it answered: NOERROR with the record, which a server gives once
// its index has synced.
func (p *installProbe) checkDNS(ctx context.Context, ip string, port int32, zone string) error {
	if ip == "" {
		return fmt.Errorf("no address yet")
	}
	addr := net.JoinHostPort(ip, strconv.Itoa(int(port)))
	for _, network := range []string{"udp", "tcp"} {
		tryCtx, cancel := context.WithTimeout(ctx, p.try)
		r, err := exchange(tryCtx, "", network, addr, soaQuery(zone))
		cancel()
		if err != nil {
			return fmt.Errorf("DNS over %s at %s: %w", strings.ToUpper(network), addr, err)
		}
		if r.Rcode != dns.RcodeSuccess || len(r.Answer) == 0 || r.Answer[0].Header().Rrtype != dns.TypeSOA {
			return fmt.Errorf("DNS over %s at %s: the SOA of %s answered %s with %d records", strings.ToUpper(network), addr, zone, dns.RcodeToString[r.Rcode], len(r.Answer))
		}
	}
	return nil
}

// mcsdContainer is the container named mcsd of a pod template.
func mcsdContainer(spec corev1.PodSpec) (*corev1.Container, error) {
	for i := range spec.Containers {
		if spec.Containers[i].Name == "mcsd" {
			return &spec.Containers[i], nil
		}
	}
	return nil, fmt.Errorf("no container named mcsd")
}

// portNamed is the number of the container's port of that name.
func portNamed(c *corev1.Container, name string) (int32, error) {
	for _, p := range c.Ports {
		if p.Name == name {
			return p.ContainerPort, nil
		}
	}
	return 0, fmt.Errorf("container %s has no port named %s", c.Name, name)
}

// zoneOf is the zone a node agent serves: its --dns-zone, else mcsd's
// default.
func zoneOf(args []string) string {
	zone := mcsddns.DefaultZone
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "--dns-zone="); ok {
			zone = v
		}
	}
	return dns.Fqdn(zone)
}
