package realnode

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/mcsd-io/mcsd/internal/record"
	"github.com/mcsd-io/mcsd/kubectlmcs/verify"
)

// kubectl mcs verify, as the quick start runs it (--broker-context alone),
// finds the members among the kubeconfig's contexts and says which it
// uses, deploys a probe in each member, reaches it from a pod of every
// other member through the cluster DNS and the ClusterSetIP, prints a
// matrix of PASS, and leaves nothing behind: no namespace in the members,
// no record on the broker.
func testVerify(t *testing.T) {
	w := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	var names, used []string
	for _, m := range w.members {
		names = append(names, m.Name)
		used = append(used, fmt.Sprintf("%s (cluster %s)", m.Name, m.id))
	}
	start := time.Now()
	out, err := w.kubectl(ctx, "", "mcs", "verify", "--broker-context", w.cs.Broker.Name)
	t.Logf("figure: kubectl mcs verify of %d members in %v:\n%s", len(names), time.Since(start).Round(100*time.Millisecond), out)
	if err != nil {
		t.Fatal(err)
	}
	// The broker's own context reaches no member.
	if want := "the members' contexts: " + strings.Join(used, ", "); !strings.Contains(out, want) {
		t.Errorf("verify did not say %q", want)
	}
	if pass, want := strings.Count(out, "PASS resolve "), len(names)*(len(names)-1); pass != want {
		t.Fatalf("%d checks passed, want %d", pass, want)
	}
	for _, m := range w.members {
		if _, err := m.Kube.CoreV1().Namespaces().Get(ctx, verify.DefaultNamespace, metav1.GetOptions{}); err == nil {
			t.Errorf("%s keeps namespace %s", m.Name, verify.DefaultNamespace)
		}
	}
	// The exporters withdraw the probes' records once their exports go.
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		records, err := w.cs.Broker.MCS.MulticlusterV1beta1().ServiceImports(metav1.NamespaceAll).List(ctx, metav1.ListOptions{LabelSelector: record.LabelServiceNamespace + "=" + verify.DefaultNamespace})
		return err == nil && len(records.Items) == 0, nil
	})
	if err != nil {
		t.Fatalf("the broker keeps records of the probes: %v", err)
	}
}
