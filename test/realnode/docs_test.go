package realnode

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	joininstall "github.com/mcsd-io/mcsd/kubectlmcs/install"
	"github.com/mcsd-io/mcsd/test/lib/docblocks"
	"github.com/mcsd-io/mcsd/test/lib/repo"
)

// The install and operate pages' shell blocks run as they are written, in
// the order docs/placeholders.md gives, on a clusterset of its own started
// without mcsd (not TestRealNodes's after its uninstall: a broker installed
// again there failed broker install's admission probes for their whole 2
// minutes, "no params found for policy binding"): each with bash -euo
// pipefail, the placeholders filled from that page's table, kubectl,
// kubectl mcs and helm on PATH, the clusters' contexts named as the table
// says. A block that fails fails
// the test naming its page and line and the line of the command that
// failed. Between pages the test puts the clusters in the state the next
// page starts from, and says so: the broker and cluster2 before the
// README (so that verify has two members), MEMBER left before the Helm
// and kustomize pages, which install it anew, cluster2 left before the
// uninstall page removes the broker.
func TestDocs(t *testing.T) {
	requireRealNodes(t)
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Minute)
	defer cancel()
	began := time.Now()
	w, err := start(ctx, t)
	if w != nil && w.cs != nil {
		// A cleanup, run after those the test adds (the namespace NS).
		t.Cleanup(w.cs.Close)
	}
	if err != nil {
		t.Fatalf("starting clusters without mcsd: %v", err)
	}
	helm := make(chan helmBuild, 1)
	go func() {
		path, err := helmBinary(ctx)
		helm <- helmBuild{path, err}
	}()

	d := w.docsRun(t)
	member, other := w.members[0], w.members[1]
	d.glue(t, "the broker installed and cluster2 joined as the README says, the namespace NS in every member and the Service SVC in MEMBER", func() error {
		if err := w.installBroker(ctx); err != nil {
			return err
		}
		if err := w.installMCSD(ctx, other, w.mcsd[0]); err != nil {
			return err
		}
		w.namespace(t, d.fill.Value("NS"))
		_, err := member.Kube.CoreV1().Services(d.fill.Value("NS")).Create(ctx, &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: d.fill.Value("SVC")},
			Spec: corev1.ServiceSpec{
				Selector: map[string]string{"app": d.fill.Value("SVC")},
				Ports:    []corev1.ServicePort{{Name: "tcp", Port: echoPort, Protocol: corev1.ProtocolTCP}},
			},
		}, metav1.CreateOptions{})
		return err
	})
	pages := map[string]docblocks.Page{}
	for _, p := range docblocks.Pages {
		pages[p.Path] = p
	}
	for _, path := range []string{"README.md", "docs/install/real-clusters.md", "docs/operate/using.md", "docs/operate/configuration.md", "docs/operate/upgrade.md"} {
		d.page(ctx, t, pages[path])
	}
	d.glue(t, "MEMBER left, so that Helm installs it anew", func() error {
		return d.leave(ctx, member)
	})
	b := <-helm
	if b.err != nil {
		t.Fatal(b.err)
	}
	d.helm = b.path
	d.pathDirs = append(d.pathDirs, filepath.Dir(b.path))
	d.page(ctx, t, pages["docs/install/helm.md"])
	d.glue(t, "MEMBER left, its release uninstalled and its namespace deleted, so that kustomize installs it anew", func() error {
		if err := d.leave(ctx, member); err != nil {
			return err
		}
		cmd := w.cs.Operator.Command(ctx, d.helm, "--kube-context", member.Name, "uninstall", "mcsd", "--namespace", mcsdNamespace, "--wait")
		cmd.Env, cmd.Dir = d.env(), d.dir
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("helm uninstall: %w\n%s", err, out)
		}
		_, err := w.kubectl(ctx, "", "--context", member.Name, "delete", "namespace", mcsdNamespace, "--wait")
		return err
	})
	d.page(ctx, t, pages["docs/install/kustomize.md"])
	d.glue(t, "cluster2 left, so that the broker goes after the last member", func() error {
		_, err := w.kubectl(ctx, "", "mcs", "leave", "--broker-context", w.cs.Broker.Name, "--context", other.Name)
		return err
	})
	d.page(ctx, t, pages["docs/operate/uninstall.md"])

	for _, u := range d.fill.Unused() {
		t.Error(u)
	}
	// The uninstall page leaves nothing of mcsd in MEMBER or the broker.
	for _, c := range w.cs.All() {
		if c.Name == other.Name {
			continue
		}
		list, err := c.Kube.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, ns := range list.Items {
			if strings.HasPrefix(ns.Name, "mcsd-") {
				t.Errorf("%s keeps namespace %s after the uninstall page", c.Name, ns.Name)
			}
		}
	}
	t.Logf("figure: %d blocks of %d pages run as written, %d not run, in %v", d.ran, len(docblocks.Pages), d.notRun, time.Since(began).Round(10*time.Millisecond))
}

// docs runs the pages' blocks.
type docs struct {
	w    *world
	root string
	// dir is the directory the blocks run in: this repository's
	// manifests and charts, linked, and what the blocks write.
	dir      string
	fill     *docblocks.Filler
	pathDirs []string
	// helm is the helm binary, once built.
	helm   string
	ran    int
	notRun int
}

// docsRun prepares the directory the blocks run in and fills the
// placeholders' table with the clusterset's values.
func (w *world) docsRun(t *testing.T) *docs {
	t.Helper()
	root, err := repo.Root()
	if err != nil {
		t.Fatal(err)
	}
	d := &docs{w: w, root: root, dir: filepath.Join(w.dir, "docs"), pathDirs: []string{w.binDir, filepath.Dir(w.kubectlPath)}}
	if err := os.RemoveAll(d.dir); err != nil {
		t.Fatal(err)
	}
	for _, sub := range []string{"", "home"} {
		if err := os.MkdirAll(filepath.Join(d.dir, sub), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, link := range []string{"manifests", "charts"} {
		if err := os.Symlink(filepath.Join(root, link), filepath.Join(d.dir, link)); err != nil {
			t.Fatal(err)
		}
	}
	table, err := docblocks.ReadTable(root, docblocks.TablePage)
	if err != nil {
		t.Fatal(err)
	}
	repository, first := joininstall.SplitImage(w.mcsd[0].Ref)
	_, second := joininstall.SplitImage(w.mcsd[1].Ref)
	member := w.members[0]
	d.fill, err = table.Filler(map[string]string{
		"BROKER":                          w.cs.Broker.Name,
		"MEMBER":                          member.Name,
		"https://broker.example.com:6443": w.cs.Broker.GatewayServer(),
		"registry.example.com/mcsd":       repository,
		"v0.1.0":                          first,
		"v0.2.0":                          second,
		"10.244.0.0/16":                   member.PodCIDR.String(),
		"FILE":                            filepath.Join(d.dir, "broker.kubeconfig"),
	})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// glue puts the clusters in the state the next page starts from.
func (d *docs) glue(t *testing.T, what string, do func() error) {
	t.Helper()
	began := time.Now()
	if err := do(); err != nil {
		t.Fatalf("between pages, %s: %v", what, err)
	}
	t.Logf("between pages: %s (%v)", what, time.Since(began).Round(10*time.Millisecond))
}

// page runs the blocks of p in order, and stops the test at the first
// that fails.
func (d *docs) page(ctx context.Context, t *testing.T, p docblocks.Page) {
	t.Helper()
	blocks, err := docblocks.ReadPage(d.root, p)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range blocks {
		text, unknown := d.fill.Fill(b)
		if len(unknown) > 0 {
			t.Fatal(strings.Join(unknown, "\n"))
		}
		if b.NotRun != "" {
			d.notRun++
			t.Logf("%s: not run: %s", b.Where(), b.NotRun)
			continue
		}
		began := time.Now()
		out, err := d.block(ctx, b, text)
		if err != nil {
			t.Fatalf("%s: the block fails: %v\n%s\n---\n%s", b.Where(), err, text, out)
		}
		d.ran++
		t.Logf("%s: ran in %v:\n%s---\n%s", b.Where(), time.Since(began).Round(10*time.Millisecond), text, out)
	}
}

// failedAt is the block script's first line: on a failure it names the
// page line of the command that failed (the script's line less this one).
const failedAt = `trap 'echo "docs: exit $? at the page line $((DOCS_LINE + LINENO - 1))" >&2' ERR`

// block runs one block's filled text with bash on the operator's machine.
func (d *docs) block(ctx context.Context, b docblocks.Block, text string) (string, error) {
	script := filepath.Join(d.dir, fmt.Sprintf("block-%s-%d.sh", strings.NewReplacer("/", "-", ".md", "").Replace(b.Page), b.Line))
	if err := os.WriteFile(script, []byte(failedAt+"\n"+text), 0o644); err != nil {
		return "", err
	}
	cmd := d.w.cs.Operator.Command(ctx, "bash", "-euo", "pipefail", script)
	cmd.Env = append(d.env(), fmt.Sprintf("DOCS_LINE=%d", b.Line))
	cmd.Dir = d.dir
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// env is the blocks' environment: the clusters' contexts, the tools on
// PATH, kubectl edit changing nothing, Helm's files in the run's
// directory.
func (d *docs) env() []string {
	home := filepath.Join(d.dir, "home")
	return append(os.Environ(),
		"KUBECONFIG="+d.w.kubeconfig,
		"PATH="+strings.Join(append(append([]string{}, d.pathDirs...), os.Getenv("PATH")), string(os.PathListSeparator)),
		"EDITOR=true", "KUBE_EDITOR=true",
		"HOME="+home, "XDG_CACHE_HOME="+filepath.Join(home, "cache"), "XDG_CONFIG_HOME="+filepath.Join(home, "config"), "XDG_DATA_HOME="+filepath.Join(home, "data"),
	)
}

// leave takes m out of the clusterset as the uninstall page says (leave
// waits until what it deletes is gone).
func (d *docs) leave(ctx context.Context, m *member) error {
	_, err := d.w.kubectl(ctx, "", "mcs", "leave", "--broker-context", d.w.cs.Broker.Name, "--context", m.Name)
	return err
}

type helmBuild struct {
	path string
	err  error
}

// helmBinary builds helm of the version go.mod requires, once per version
// into the cache (test/tools/helm/build.sh, which make helm runs before
// the tests), and returns its path.
func helmBinary(ctx context.Context) (string, error) {
	return repo.Tool(ctx, "helm", "helm")
}
