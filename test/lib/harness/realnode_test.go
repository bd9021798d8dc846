package harness_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/mcsd-io/mcsd/test/lib/harness"
	"github.com/mcsd-io/mcsd/test/lib/images"
	"github.com/mcsd-io/mcsd/test/lib/netns"
	"github.com/mcsd-io/mcsd/test/lib/testenv"
)

// A run with real nodes killed with SIGKILL leaves more than its control
// planes: containerd and the kubelet die with it (parent-death signal), but
// the runc shims and the containers they run do not. The next start finds
// them through the run's cgroups and kills them, which ends the nodes'
// mount namespaces and every mount in them, and removes the cgroups, the
// namespaces and the state directory; the kernel tunables the kubelets
// changed are put back unless another run with kubelets is alive.
func TestRealNodesOfAKilledRunAreCleanedOnTheNextStart(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequireCommands(t, "runc", "nsenter", "unshare", "gcc")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	pause, err := images.Pause(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cmd, runID := clustersetUp(ctx, t, "--clusters=1", "--real-nodes=1")
	runDir := filepath.Join(harness.StateBase(), runID)

	// A pod runs on the node: a shim and its containers.
	cfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(runDir, "cluster1", "kubeconfig"))
	if err != nil {
		t.Fatal(err)
	}
	kube := kubernetes.NewForConfigOrDie(cfg)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "survivor"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "pause", Image: pause.Ref}}}}
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		if _, err := kube.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			return false, nil
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("creating a pod: %v", err)
	}
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := kube.CoreV1().Pods("default").Get(ctx, pod.Name, metav1.GetOptions{})
		return err == nil && p.Status.Phase == corev1.PodRunning, nil
	})
	if err != nil {
		t.Fatalf("the pod never ran: %v", err)
	}
	cgroup := filepath.Join("/sys/fs/cgroup/pids/mcsd-harness", runID)
	before := procsOf(t, cgroup)

	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	// What the parent-death signal does not reach lives on.
	var survivors []int
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		survivors = procsOf(t, cgroup)
		for _, pid := range survivors {
			if cmdline(pid) == "" {
				continue
			}
			if strings.Contains(cmdline(pid), "kubelet") || strings.Contains(cmdline(pid), "containerd --config") {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("the kubelet or containerd outlived its killed owner: %v", survivors)
	}
	shims := 0
	for _, pid := range survivors {
		if strings.Contains(cmdline(pid), "containerd-shim") {
			shims++
		}
	}
	if shims == 0 {
		t.Fatalf("no shim outlived the killed run (processes left: %v of %v): the test no longer shows what the cleanup is for", survivors, before)
	}

	removed, err := harness.CleanStale()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("removed: %v", removed)
	for _, pid := range before {
		if syscall.Kill(pid, 0) == nil && cmdline(pid) != "" && procOfRun(pid, runID) {
			t.Errorf("process %d (%s) of the killed run survived cleaning", pid, cmdline(pid))
		}
	}
	hierarchies, _ := filepath.Glob("/sys/fs/cgroup/*/mcsd-harness/" + runID)
	if len(hierarchies) > 0 {
		t.Errorf("cgroups of the killed run survived cleaning: %v", hierarchies)
	}
	if _, err := os.Stat(runDir); !os.IsNotExist(err) {
		t.Errorf("state directory %s survived cleaning", runDir)
	}
	if left, _ := netns.List("mcsdh" + runID + "-"); len(left) > 0 {
		t.Errorf("namespaces survived cleaning: %v", left)
	}
}

// procsOf lists the processes of a cgroup tree.
func procsOf(t *testing.T, dir string) []int {
	t.Helper()
	var pids []int
	_ = filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		data, _ := os.ReadFile(filepath.Join(path, "cgroup.procs"))
		for _, f := range strings.Fields(string(data)) {
			if pid, err := strconv.Atoi(f); err == nil {
				pids = append(pids, pid)
			}
		}
		return nil
	})
	return pids
}

func cmdline(pid int) string {
	data, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	return strings.ReplaceAll(string(data), "\x00", " ")
}

// procOfRun says whether a process is still in the run's cgroups (a pid
// may have been reused by an unrelated process since).
func procOfRun(pid int, runID string) bool {
	data, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	return strings.Contains(string(data), "mcsd-harness/"+runID)
}
