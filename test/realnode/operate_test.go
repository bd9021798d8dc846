package realnode

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/mcsd-io/mcsd/kubectlmcs/diagnose"
)

// kubectl mcs diagnose passes every check on each member, the check of the
// node agents included: it reads each one's /readyz?verbose (its proxier
// programmed the node) through the API server's pod proxy, which here
// reaches the pods on their nodes. Pod reachability between the members
// has its own test (diagnose_reach_test.go).
func testDiagnose(t *testing.T) {
	w := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	for _, m := range w.members {
		out, err := w.kubectl(ctx, "", "mcs", "diagnose", "--context", m.Name, "--skip-reachability", "-o", "json")
		if err != nil {
			t.Errorf("%s: %v", m.Name, err)
		}
		var checks []diagnose.Check
		if err := json.Unmarshal([]byte(out[strings.Index(out, "["):]), &checks); err != nil {
			t.Fatalf("%s: diagnose printed no checks: %v\n%s", m.Name, err, out)
		}
		pods := false
		for _, c := range checks {
			if c.Result != diagnose.Pass {
				t.Errorf("%s: %s %s: %s (fix: %s)", m.Name, c.Result, c.Name, c.Detail, c.Fix)
			}
			if c.Name == "mcsd pods" {
				pods = true
				t.Logf("%s: %s %s: %s", m.Name, c.Result, c.Name, c.Detail)
			}
		}
		if !pods {
			t.Errorf("%s: diagnose did not check the mcsd pods: %+v", m.Name, checks)
		}
	}
}

// kubectl mcs gather collects the logs of every mcsd pod of a member from
// its kubelet, through the API server.
func testGather(t *testing.T) {
	w := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	for _, m := range w.members {
		archive := filepath.Join(w.dir, m.Name+"-gather.tar.gz")
		if _, err := w.kubectl(ctx, "", "mcs", "gather", "--context", m.Name, "--output", archive); err != nil {
			t.Fatalf("%s: %v", m.Name, err)
		}
		files, err := readArchive(archive)
		if err != nil {
			t.Fatalf("%s: %v", m.Name, err)
		}
		pods, err := m.Kube.CoreV1().Pods(mcsdNamespace).List(ctx, metav1.ListOptions{LabelSelector: mcsdSelector})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range pods.Items {
			name := "member/" + mcsdNamespace + "/logs/" + p.Name + "/mcsd.log"
			if !strings.Contains(files[name], "Starting mcsd") {
				t.Errorf("%s: the archive's %s does not hold the log of pod %s on %s (%d bytes)", m.Name, name, p.Name, p.Spec.NodeName, len(files[name]))
			}
		}
		t.Logf("%s: gather wrote %d files, the logs of %d mcsd pods among them", m.Name, len(files), len(pods.Items))
	}
}

// readArchive reads a .tar.gz into memory, by file name.
func readArchive(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		return nil, err
	}
	tr := tar.NewReader(gz)
	files := map[string]string{}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files, nil
		}
		if err != nil {
			return nil, err
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			return nil, err
		}
		files[h.Name] = string(data)
	}
}
