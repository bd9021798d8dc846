package mcsdimage

import (
	"archive/tar"
	"context"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mcsd-io/mcsd/internal/image/oci"
	"github.com/mcsd-io/mcsd/test/lib/testenv"
)

// The built image is the one the Dockerfile describes: same config, same
// files, and a binary that says the version it was stamped with.
func TestBuiltImageMatchesDockerfile(t *testing.T) {
	testenv.RequireCommands(t, "mmdebstrap", "go", "skopeo")
	const version, revision = "v9.8.7-test", "0123abcd"
	df, err := parseDockerfile("../../../Dockerfile", map[string]string{"VERSION": version, "REVISION": revision})
	if err != nil {
		t.Fatal(err)
	}
	source, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	cache := os.Getenv("MCSD_CACHE")
	if cache == "" {
		cache = filepath.Join(source, ".cache")
	}
	img, err := Build(context.Background(), Options{Source: source, Version: version, Revision: revision, Cache: cache, Log: testWriter{t}})
	if err != nil {
		t.Fatal(err)
	}
	archive := filepath.Join(t.TempDir(), "mcsd.tar")
	if err := oci.Write(archive, DefaultRepository+":"+version, img); err != nil {
		t.Fatal(err)
	}
	img, refs, err := oci.Read(archive)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(refs, []string{"localhost/mcsd:" + version}) {
		t.Errorf("archive names the image %q", refs)
	}

	t.Run("the config is the Dockerfile's", func(t *testing.T) {
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		c := cf.Config
		if cf.OS != "linux" || cf.Architecture == "" {
			t.Errorf("platform %s/%s: containerd cannot unpack it", cf.OS, cf.Architecture)
		}
		if !slices.Equal(c.Entrypoint, df.Entrypoint) || len(c.Cmd) != 0 {
			t.Errorf("entrypoint %q cmd %q, Dockerfile's %q and none", c.Entrypoint, c.Cmd, df.Entrypoint)
		}
		if c.User != df.User {
			t.Errorf("user %q, Dockerfile's %q", c.User, df.User)
		}
		// debian:bookworm-slim's PATH, which the Dockerfile inherits.
		if !slices.Contains(c.Env, "PATH="+oci.DefaultPath) {
			t.Errorf("env %q lacks Debian's PATH, through which knftables finds nft", c.Env)
		}
		if len(c.Labels) != len(df.Labels) {
			t.Errorf("labels %v, Dockerfile's %v", c.Labels, df.Labels)
		}
		for k, v := range df.Labels {
			if c.Labels[k] != v {
				t.Errorf("label %s = %q, Dockerfile's %q", k, c.Labels[k], v)
			}
		}
	})

	files, err := oci.Files(img, df.CopyTo, "/var/lib/dpkg/status")
	if err != nil {
		t.Fatal(err)
	}

	t.Run("nft, iptables and the binary are where the Dockerfile puts them", func(t *testing.T) {
		if h := files[df.CopyTo].Header; h == nil || h.Typeflag != tar.TypeReg || h.Mode&0o111 == 0 {
			t.Errorf("%s: %+v, want an executable file", df.CopyTo, h)
		}
		for _, p := range []string{"/usr/sbin/nft", "/usr/sbin/iptables", "/usr/sbin/ip6tables"} {
			if target := resolve(files, p); target == "" || files[target].Header.Typeflag != tar.TypeReg {
				t.Errorf("%s does not lead to a file in the image (%q)", p, target)
			}
		}
		status := string(files["/var/lib/dpkg/status"].Data)
		for _, pkg := range df.Packages {
			if !strings.Contains(status, "Package: "+pkg+"\nStatus: install ok installed\n") {
				t.Errorf("dpkg does not list %s as installed", pkg)
			}
		}
	})

	t.Run("the image is slim: no documentation, manual pages or device nodes", func(t *testing.T) {
		for p, e := range files {
			switch {
			case strings.HasPrefix(p, "/usr/share/man/") && e.Header.Typeflag == tar.TypeReg,
				strings.HasPrefix(p, "/usr/share/doc/") && e.Header.Typeflag == tar.TypeReg && path.Base(p) != "copyright",
				e.Header.Typeflag == tar.TypeChar || e.Header.Typeflag == tar.TypeBlock:
				t.Errorf("%s is in the image", p)
			}
		}
	})

	t.Run("the binary says the version it was stamped with", func(t *testing.T) {
		bin := filepath.Join(t.TempDir(), "mcsd")
		if err := os.WriteFile(bin, files[df.CopyTo].Data, 0o755); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(bin, "--version").CombinedOutput()
		if err != nil {
			t.Fatalf("%s --version: %v\n%s", df.CopyTo, err, out)
		}
		if want := "mcsd " + version + " (revision " + revision + ","; !strings.HasPrefix(string(out), want) {
			t.Errorf("mcsd --version says %q, want it to start with %q", out, want)
		}
	})

	t.Run("skopeo reads the archive", func(t *testing.T) {
		out, err := exec.Command("skopeo", "inspect", "docker-archive:"+archive).CombinedOutput()
		if err != nil {
			t.Fatalf("skopeo inspect: %v\n%s", err, out)
		}
		if !strings.Contains(string(out), `"org.opencontainers.image.version": "`+version+`"`) {
			t.Errorf("skopeo inspect shows no version label:\n%s", out)
		}
	})
}

// resolve follows symbolic links from p inside the image's files and returns
// the path they end at, or "" when a link leads nowhere.
func resolve(files map[string]oci.Entry, p string) string {
	for range 16 {
		e, ok := files[p]
		if !ok {
			return ""
		}
		if e.Header.Typeflag != tar.TypeSymlink {
			return p
		}
		target := e.Header.Linkname
		if !path.IsAbs(target) {
			target = path.Join(path.Dir(p), target)
		}
		p = path.Clean(target)
	}
	return ""
}

// testWriter sends a build's progress to the test log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
