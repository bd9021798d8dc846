package realnode

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/yaml"

	"github.com/mcsd-io/mcsd/test/lib/testenv"
)

// prometheusAddress is where the test's Prometheus listens, on the
// loopback of the node it runs on.
const prometheusAddress = "127.0.0.1:9090"

// prometheus is a Prometheus server of Debian's package, run by the test
// in a member's node (its network namespace), as a cluster's own
// Prometheus: it finds mcsd's pods through the member's API server with the
// docs' scrape config and evaluates the chart's alert rules.
type prometheus struct {
	m    *member
	cmd  *exec.Cmd
	http *http.Client
	// sd is the docs' pod discovery, which discover writes into
	// targetsFile.
	sd          any
	targetsFile string
	// exited is closed when the process has exited, with err.
	exited chan struct{}
	err    error
}

// startPrometheus starts Prometheus on m's first node, its data in a
// directory of t's that the test removes.
func startPrometheus(ctx context.Context, t *testing.T, w *world, m *member) *prometheus {
	t.Helper()
	dir := t.TempDir()
	scrape, err := docsScrapeConfig(filepath.Join(w.root, "docs", "reference", "metrics.md"))
	if err != nil {
		t.Fatal(err)
	}
	// Debian's Prometheus is built without Kubernetes discovery: the test
	// discovers the pods as its role pod would, into a file of targets with
	// the same meta labels, and the docs' relabelling applies unchanged.
	sds, _ := scrape["kubernetes_sd_configs"].([]any)
	if len(sds) != 1 {
		t.Fatalf("the docs' scrape config has kubernetes_sd_configs %v, want one", sds)
	}
	p := &prometheus{m: m, sd: sds[0], targetsFile: filepath.Join(dir, "targets.json"), exited: make(chan struct{})}
	if err := p.discover(ctx); err != nil {
		t.Fatal(err)
	}
	delete(scrape, "kubernetes_sd_configs")
	scrape["file_sd_configs"] = []any{map[string]any{"files": []any{p.targetsFile}}}
	// Outside a pod, as the docs say: a token of a ServiceAccount that may
	// read /metrics in credentials_file.
	auth, _ := scrape["authorization"].(map[string]any)
	if auth == nil || auth["credentials_file"] == nil {
		t.Fatalf("the docs' scrape config has no authorization.credentials_file: %v", scrape)
	}
	token, err := metricsToken(ctx, m)
	if err != nil {
		t.Fatal(err)
	}
	auth["credentials_file"] = filepath.Join(dir, "token")
	if err := os.WriteFile(filepath.Join(dir, "token"), []byte(token), 0o600); err != nil {
		t.Fatal(err)
	}
	config := map[string]any{
		// Short intervals so that the rules see a fault within seconds;
		// the rules' own for: durations are the shipped ones.
		"global":         map[string]any{"scrape_interval": "5s", "evaluation_interval": "5s"},
		"rule_files":     []any{filepath.Join(w.root, "charts", "mcsd", "files", "prometheus-rules.yaml")},
		"scrape_configs": []any{scrape},
	}
	data, err := yaml.Marshal(config)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	node := m.RealNodes()[0]
	p.http = &http.Client{Transport: &http.Transport{DialContext: node.NS.Dial, DisableKeepAlives: true}}
	p.cmd = node.NS.Command(context.Background(), "prometheus",
		"--config.file="+filepath.Join(dir, "prometheus.yml"), "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+prometheusAddress, "--log.level=warn")
	log, err := os.Create(filepath.Join(dir, "prometheus.log"))
	if err != nil {
		t.Fatal(err)
	}
	p.cmd.Stdout, p.cmd.Stderr = log, log
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.exited:
		case <-time.After(30 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
		_ = log.Close()
		if t.Failed() {
			out, _ := os.ReadFile(log.Name())
			t.Logf("%s: Prometheus's log:\n%s", m.Name, out)
		}
	})
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		select {
		case <-p.exited:
			return false, fmt.Errorf("prometheus exited: %v", p.err)
		default:
		}
		_, err := p.get(ctx, "/-/ready")
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("%s: Prometheus never ready: %v", m.Name, err)
	}
	return p
}

// discover writes the targets of the pods that run now, which Prometheus
// reads again as the file changes.
func (p *prometheus) discover(ctx context.Context) error {
	targets, err := podTargets(ctx, p.m, p.sd)
	if err != nil {
		return err
	}
	// Written whole, then renamed: Prometheus never reads half a file.
	tmp := p.targetsFile + ".new"
	if err := os.WriteFile(tmp, targets, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, p.targetsFile)
}

// podTargets are the targets Prometheus's Kubernetes discovery of role pod
// finds with sd (its namespaces) in m, in file_sd's JSON: one per container
// port of each pod, with the meta labels the docs' relabelling reads.
func podTargets(ctx context.Context, m *member, sd any) ([]byte, error) {
	var c struct {
		Role       string `json:"role"`
		Namespaces struct {
			Names []string `json:"names"`
		} `json:"namespaces"`
	}
	data, err := json.Marshal(sd)
	if err == nil {
		err = json.Unmarshal(data, &c)
	}
	if err != nil || c.Role != "pod" || len(c.Namespaces.Names) == 0 {
		return nil, fmt.Errorf("the docs' kubernetes_sd_config %v: want role pod in named namespaces (%v)", sd, err)
	}
	type group struct {
		Targets []string          `json:"targets"`
		Labels  map[string]string `json:"labels"`
	}
	var groups []group
	for _, ns := range c.Namespaces.Names {
		pods, err := m.Kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, err
		}
		for _, p := range pods.Items {
			if p.Status.PodIP == "" {
				continue
			}
			for _, ctr := range p.Spec.Containers {
				for _, port := range ctr.Ports {
					labels := map[string]string{
						"__meta_kubernetes_namespace":               p.Namespace,
						"__meta_kubernetes_pod_name":                p.Name,
						"__meta_kubernetes_pod_container_name":      ctr.Name,
						"__meta_kubernetes_pod_container_port_name": port.Name,
						"__meta_kubernetes_pod_node_name":           p.Spec.NodeName,
					}
					for k, v := range p.Labels {
						labels["__meta_kubernetes_pod_label_"+promLabelName(k)] = v
					}
					groups = append(groups, group{Targets: []string{net.JoinHostPort(p.Status.PodIP, strconv.Itoa(int(port.ContainerPort)))}, Labels: labels})
				}
			}
		}
	}
	return json.Marshal(groups)
}

// promLabelName is a Kubernetes label's name as Prometheus's discovery
// writes it: every character outside [a-zA-Z0-9_] an underscore.
func promLabelName(k string) string {
	return regexp.MustCompile(`[^a-zA-Z0-9_]`).ReplaceAllString(k, "_")
}

// docsScrapeConfig is the scrape config of mcsd's pods that the metrics
// page gives: its YAML block with job_name mcsd.
func docsScrapeConfig(page string) (map[string]any, error) {
	text, err := os.ReadFile(page)
	if err != nil {
		return nil, err
	}
	for _, block := range regexp.MustCompile("(?s)```yaml\n(.*?)```").FindAllStringSubmatch(string(text), -1) {
		var c struct {
			ScrapeConfigs []map[string]any `json:"scrape_configs"`
		}
		if err := yaml.Unmarshal([]byte(block[1]), &c); err != nil {
			return nil, fmt.Errorf("%s: a YAML block does not parse: %w", page, err)
		}
		for _, s := range c.ScrapeConfigs {
			if s["job_name"] == "mcsd" {
				return s, nil
			}
		}
	}
	return nil, fmt.Errorf("%s gives no scrape config of job mcsd", page)
}

func (p *prometheus) get(ctx context.Context, path string) ([]byte, error) {
	return httpGet(ctx, p.http, "http://"+prometheusAddress+path, "")
}

// api gets an API path and decodes its data into v.
func (p *prometheus) api(ctx context.Context, path string, v any) error {
	body, err := p.get(ctx, path)
	if err != nil {
		return err
	}
	var r struct {
		Status string          `json:"status"`
		Data   json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(body, &r); err != nil || r.Status != "success" {
		return fmt.Errorf("%s: %v %s", path, err, body)
	}
	return json.Unmarshal(r.Data, v)
}

type target struct {
	Labels    map[string]string `json:"labels"`
	ScrapeURL string            `json:"scrapeUrl"`
	Health    string            `json:"health"`
	LastError string            `json:"lastError"`
}

func (p *prometheus) targets(ctx context.Context) ([]target, error) {
	var d struct {
		Active []target `json:"activeTargets"`
	}
	err := p.api(ctx, "/api/v1/targets?state=active", &d)
	return d.Active, err
}

// query returns the samples of an instant query, as labels and value.
func (p *prometheus) query(ctx context.Context, q string) ([]string, error) {
	var d struct {
		Result []struct {
			Metric map[string]string `json:"metric"`
			Value  [2]any            `json:"value"`
		} `json:"result"`
	}
	if err := p.api(ctx, "/api/v1/query?query="+url.QueryEscape(q), &d); err != nil {
		return nil, err
	}
	var out []string
	for _, r := range d.Result {
		out = append(out, fmt.Sprintf("%s %v", r.Metric["instance"], r.Value[1]))
	}
	return out, nil
}

type alert struct {
	Labels map[string]string `json:"labels"`
	State  string            `json:"state"`
}

// alerts are the alerts pending or firing now.
func (p *prometheus) alerts(ctx context.Context) ([]alert, error) {
	var d struct {
		Alerts []alert `json:"alerts"`
	}
	err := p.api(ctx, "/api/v1/alerts", &d)
	return d.Alerts, err
}

// alertState is the state of the alert named name (pending, firing) at
// any of its label sets, "" when it is inactive.
func (p *prometheus) alertState(ctx context.Context, name string) (string, error) {
	as, err := p.alerts(ctx)
	if err != nil {
		return "", err
	}
	state := ""
	for _, a := range as {
		if a.Labels["alertname"] == name && (state == "" || a.State == "firing") {
			state = a.State
		}
	}
	return state, nil
}

// firing lists the alerts firing now.
func (p *prometheus) firing(ctx context.Context) ([]string, error) {
	as, err := p.alerts(ctx)
	var out []string
	for _, a := range as {
		if a.State == "firing" {
			out = append(out, a.Labels["alertname"]+" "+a.Labels["instance"])
		}
	}
	return out, err
}

// awaitAlert waits until the alert named name is firing (want true) or inactive (false)
// and returns how long that took.
func (p *prometheus) awaitAlert(ctx context.Context, name string, want bool) (time.Duration, error) {
	began := time.Now()
	last := ""
	err := wait.PollUntilContextTimeout(ctx, time.Second, 10*time.Minute, true, func(ctx context.Context) (bool, error) {
		var err error
		last, err = p.alertState(ctx, name)
		if err != nil {
			return false, nil
		}
		return (last == "firing") == want && (want || last == ""), nil
	})
	if err != nil {
		return 0, fmt.Errorf("%s: %s is %q after %v, want firing %v: %w", p.m.Name, name, last, time.Since(began).Round(time.Second), want, err)
	}
	return time.Since(began), nil
}

// keySeries are a query per component whose samples say it works: each
// must have at least one.
var keySeries = []string{
	`mcsd_build_info`,
	`leader_election_master_status{name="mcsd-controllers"} == 1`,
	`mcsd_importer_live_clusters == 2`,
	`mcsd_importer_broker_reachable == 1`,
	`mcsd_exporter_lease_renewals_total{result="success"} > 0`,
	`mcsd_dns_index_synced == 1`,
	`mcsd_dns_index_services >= 0`,
	`mcsd_proxier_sync_proxy_rules_last_timestamp_seconds > 0`,
	`workqueue_adds_total{name="importer"} > 0`,
	`rest_client_requests_total > 0`,
}

// testPrometheus runs a Prometheus per member, with the docs' scrape config
// and the chart's alert rules: every mcsd pod is a target that is up, each
// component's key series have values, and alerts fire on real faults and
// clear after: a member's controllers stopped (MCSDClusterGone), the
// broker's API server stopped (MCSDBrokerUnreachable).
func testPrometheus(t *testing.T) {
	w := setup(t)
	testenv.RequireCommands(t, "prometheus")
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	proms := map[*member]*prometheus{}
	for _, m := range w.members {
		proms[m] = startPrometheus(ctx, t, w, m)
	}
	t.Run("every mcsd pod is a target that is up, with the key series", func(t *testing.T) {
		for _, m := range w.members {
			p := proms[m]
			pods, err := mcsdPods(ctx, m)
			if err != nil {
				t.Fatal(err)
			}
			var ts []target
			err = wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
				if ts, err = p.targets(ctx); err != nil {
					return false, nil
				}
				if len(ts) != len(pods) {
					return false, nil
				}
				for _, tg := range ts {
					if tg.Health != "up" {
						return false, nil
					}
				}
				return true, nil
			})
			if err != nil {
				t.Fatalf("%s: want %d mcsd pods up as targets, have %+v: %v", m.Name, len(pods), ts, err)
			}
			for _, pod := range pods {
				found := false
				for _, tg := range ts {
					found = found || tg.Labels["instance"] == pod.pod.Name
				}
				if !found {
					t.Errorf("%s: pod %s is no target: %+v", m.Name, pod.pod.Name, ts)
				}
			}
			var missing []string
			err = wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
				missing = missing[:0]
				for _, q := range keySeries {
					if got, err := p.query(ctx, q); err != nil || len(got) == 0 {
						missing = append(missing, q)
					}
				}
				return len(missing) == 0, nil
			})
			if err != nil {
				t.Errorf("%s: no sample of %q", m.Name, missing)
			}
			firing, err := p.firing(ctx)
			if err != nil || len(firing) > 0 {
				t.Errorf("%s: alerts firing on a healthy clusterset: %v %v", m.Name, firing, err)
			}
			t.Logf("figure: %s: %d mcsd pods are targets, all up; %d key series have values", m.Name, len(ts), len(keySeries))
		}
	})
	if t.Failed() {
		return
	}
	watching, stopped := w.members[0], w.members[1]
	t.Run("a member's controllers stopped: MCSDClusterGone fires, and clears", func(t *testing.T) {
		p := proms[watching]
		scale := func(n int32) {
			t.Helper()
			s, err := stopped.Kube.AppsV1().Deployments(mcsdNamespace).GetScale(ctx, controllerDeployment, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			s.Spec.Replicas = n
			if _, err := stopped.Kube.AppsV1().Deployments(mcsdNamespace).UpdateScale(ctx, controllerDeployment, s, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		scale(0)
		restored := false
		defer func() {
			if !restored {
				scale(controllerReplicas)
			}
		}()
		fired, err := p.awaitAlert(ctx, "MCSDClusterGone", true)
		if err != nil {
			t.Fatal(err)
		}
		scale(controllerReplicas)
		restored = true
		cleared, err := p.awaitAlert(ctx, "MCSDClusterGone", false)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("figure: %s's controllers scaled to 0: MCSDClusterGone fired on %s %v later (for: 2m); scaled back: cleared %v later",
			stopped.Name, watching.Name, fired.Round(time.Second), cleared.Round(time.Second))
		if err := w.awaitRollout(ctx, stopped, w.mcsd[0].Ref); err != nil {
			t.Fatal(err)
		}
		// The new controller pods are the stopped member's targets now.
		if err := proms[stopped].discover(ctx); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("the broker's API server stopped: MCSDBrokerUnreachable fires, and clears", func(t *testing.T) {
		w.cs.Broker.StopAPIServer()
		restarted := false
		defer func() {
			if !restarted {
				_ = w.cs.Broker.StartAPIServer(context.Background())
			}
		}()
		var fired time.Duration
		for _, m := range w.members {
			d, err := proms[m].awaitAlert(ctx, "MCSDBrokerUnreachable", true)
			if err != nil {
				t.Fatal(err)
			}
			fired = max(fired, d)
		}
		if err := w.cs.Broker.StartAPIServer(ctx); err != nil {
			t.Fatal(err)
		}
		restarted = true
		var cleared time.Duration
		for _, m := range w.members {
			d, err := proms[m].awaitAlert(ctx, "MCSDBrokerUnreachable", false)
			if err != nil {
				t.Fatal(err)
			}
			cleared = max(cleared, d)
		}
		t.Logf("figure: broker's API server stopped: MCSDBrokerUnreachable fired on every member within %v (for: 2m); restarted: cleared within %v",
			fired.Round(time.Second), cleared.Round(time.Second))
	})
	for _, m := range w.members {
		if firing, err := proms[m].firing(ctx); err != nil || len(firing) > 0 {
			t.Errorf("%s: alerts still firing at the end: %v %v", m.Name, firing, err)
		}
	}
}
