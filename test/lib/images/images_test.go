package images

import (
	"bufio"
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcsd-io/mcsd/internal/image/oci"
	"github.com/mcsd-io/mcsd/test/lib/echo"
	"github.com/mcsd-io/mcsd/test/lib/testenv"
)

// checkArchive reads img's archive back and returns its entrypoint binary,
// extracted to a file, after checking what every image here must be: named
// under localhost/ by its reference, for this platform, one static binary.
func checkArchive(t *testing.T, img Image, entrypoint, user string) string {
	t.Helper()
	if !strings.HasPrefix(img.Ref, "localhost/") {
		t.Errorf("reference %s is not under localhost/: a node could pull it", img.Ref)
	}
	got, refs, err := oci.Read(img.Path)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(refs, []string{img.Ref}) {
		t.Errorf("%s names the image %q, want %s", img.Path, refs, img.Ref)
	}
	cf, err := got.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.OS != "linux" || cf.Architecture != runtime.GOARCH {
		t.Errorf("%s: platform %s/%s", img.Ref, cf.OS, cf.Architecture)
	}
	if !slices.Equal(cf.Config.Entrypoint, []string{entrypoint}) || cf.Config.User != user {
		t.Errorf("%s: entrypoint %q user %q, want %s and %s", img.Ref, cf.Config.Entrypoint, cf.Config.User, entrypoint, user)
	}
	files, err := oci.Files(got, entrypoint)
	if err != nil {
		t.Fatal(err)
	}
	e, ok := files[entrypoint]
	if !ok || e.Header.Mode&0o111 == 0 {
		t.Fatalf("%s: no executable %s in the image", img.Ref, entrypoint)
	}
	bin := filepath.Join(t.TempDir(), filepath.Base(entrypoint))
	if err := os.WriteFile(bin, e.Data, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := requireStatic(bin); err != nil {
		t.Errorf("%s: %v", img.Ref, err)
	}
	// An independent reader of the format: what it accepts, runtimes and
	// registries accept.
	if out, err := exec.Command("skopeo", "inspect", "docker-archive:"+img.Path).CombinedOutput(); err != nil {
		t.Errorf("skopeo inspect %s: %v\n%s", img.Path, err, out)
	}
	return bin
}

func build(t *testing.T, what string, f func(context.Context) (Image, error)) Image {
	t.Helper()
	start := time.Now()
	img, err := f(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(img.Path)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: %s in %s (%.1f MiB) after %.1fs", what, img.Ref, img.Path, float64(fi.Size())/(1<<20), time.Since(start).Seconds())
	return img
}

func TestPause(t *testing.T) {
	testenv.RequireCommands(t, "go", "gcc", "skopeo")
	img := build(t, "pause", Pause)
	bin := checkArchive(t, img, "/pause", "65535:65535")
	out, err := exec.Command(bin, "-v").CombinedOutput()
	tag := img.Ref[strings.LastIndex(img.Ref, ":")+1:]
	if err != nil || !strings.Contains(string(out), "v"+tag+"-") {
		t.Errorf("pause -v: %v, %q; want its version v%s-...", err, out, tag)
	}
}

func TestCoreDNS(t *testing.T) {
	testenv.RequireCommands(t, "go", "skopeo")
	img := build(t, "coredns", CoreDNS)
	bin := checkArchive(t, img, "/coredns", "0:0")
	out, err := exec.Command(bin, "-version").CombinedOutput()
	release := strings.TrimPrefix(img.Ref[strings.LastIndex(img.Ref, ":")+1:], "v")
	if err != nil || !strings.Contains(string(out), "CoreDNS-"+release) {
		t.Errorf("coredns -version: %v, %q; want CoreDNS-%s", err, out, release)
	}
}

func TestEcho(t *testing.T) {
	testenv.RequireCommands(t, "go", "skopeo")

	// Tests of several packages ask at once: one build, one answer.
	var wg sync.WaitGroup
	got := make([]Image, 4)
	errs := make([]error, 4)
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i], errs[i] = Echo(context.Background())
		}()
	}
	wg.Wait()
	for i := range got {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		if got[i] != got[0] {
			t.Errorf("concurrent callers got %+v and %+v", got[0], got[i])
		}
	}
	img := build(t, "echo", Echo)
	bin := checkArchive(t, img, "/echo", "0:0")

	t.Run("the binary answers TCP and UDP as a harness pod does", func(t *testing.T) {
		port := freePort(t)
		cmd := exec.Command(bin, "-ports", strconv.Itoa(port))
		cmd.Env = append(os.Environ(), "POD_IPS=127.0.0.1", "POD_NAME=web-0", "CLUSTER=east")
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		})
		// It says so once its sockets are bound.
		if line, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || !strings.Contains(line, "answering") {
			t.Fatalf("echo did not start: %q, %v", line, err)
		}
		want := echo.Identity{IP: "127.0.0.1", Cluster: "east", Pod: "web-0"}
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for _, network := range []string{"tcp", "udp"} {
			c, err := net.Dial(network, addr)
			if err != nil {
				t.Fatal(err)
			}
			ask := echo.AskTCP
			if network == "udp" {
				ask = echo.AskUDP
			}
			id, err := ask(ctx, c)
			c.Close()
			if err != nil || id != want {
				t.Errorf("%s answer %+v, %v; want %+v", network, id, err, want)
			}
		}
	})

	t.Run("a bad flag stops it naming the flag", func(t *testing.T) {
		out, err := exec.Command(bin, "-ips", "10.0.0.300", "-cluster", "c", "-pod", "p").CombinedOutput()
		if err == nil || !strings.Contains(string(out), "-ips") {
			t.Errorf("echo -ips 10.0.0.300: %v, %q; want an error naming -ips", err, out)
		}
	})
}

func TestMCSD(t *testing.T) {
	testenv.RequireCommands(t, "go", "mmdebstrap", "skopeo")
	for _, tag := range []string{"v0.0.0-images-a", "v0.0.0-images-b"} {
		img := build(t, "mcsd "+tag, func(ctx context.Context) (Image, error) { return MCSD(ctx, tag) })
		if img.Ref != "localhost/mcsd:"+tag {
			t.Errorf("reference %s, want localhost/mcsd:%s", img.Ref, tag)
		}
		bin := checkArchive(t, img, "/usr/local/bin/mcsd", "0:0")
		out, err := exec.Command(bin, "--version").CombinedOutput()
		if err != nil || !strings.HasPrefix(string(out), "mcsd "+tag+" ") {
			t.Errorf("mcsd --version: %v, %q; want the tag %s as its version", err, out, tag)
		}
	}
	if _, err := MCSD(context.Background(), "not a tag"); err == nil {
		t.Error(`MCSD("not a tag") succeeded, want an error`)
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
