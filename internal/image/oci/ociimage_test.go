package oci

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/mcsd-io/mcsd/test/lib/testenv"
)

// writeTestImage builds a two-layer image, writes it and returns its archive.
func writeTestImage(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	tree := filepath.Join(dir, "tree")
	for _, d := range []string{"sub", "private"} {
		if err := os.MkdirAll(filepath.Join(tree, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(tree, "sub", "conf"), []byte("x=1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("sub/conf", filepath.Join(tree, "link")); err != nil {
		t.Fatal(err)
	}
	tree1, err := DirLayer("COPY tree /etc/app", tree, "/etc/app")
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "app")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	files, err := FilesLayer("COPY app /usr/local/bin/app",
		File{Path: "/usr/local/bin/app", Source: bin},
		File{Path: "/etc/app/sub/conf", Data: []byte("x=2\n")})
	if err != nil {
		t.Fatal(err)
	}
	img, err := Build(Config{
		Entrypoint: []string{"/usr/local/bin/app"},
		Cmd:        []string{"--flag"},
		User:       "65532:65532",
		Env:        []string{"MODE=test"},
		WorkingDir: "/etc/app",
		Labels:     map[string]string{"org.opencontainers.image.version": "v1"},
	}, tree1, files)
	if err != nil {
		t.Fatal(err)
	}
	archive := filepath.Join(dir, "out", "image.tar")
	if err := Write(archive, "localhost/app:v1", img); err != nil {
		t.Fatal(err)
	}
	return archive
}

func TestBuildWriteRead(t *testing.T) {
	archive := writeTestImage(t)
	img, refs, err := Read(archive)
	if err != nil {
		t.Fatal(err)
	}

	t.Run("the archive names the image by its reference", func(t *testing.T) {
		if diff := cmp.Diff([]string{"localhost/app:v1"}, refs); diff != "" {
			t.Errorf("refs (-want +got):\n%s", diff)
		}
	})

	t.Run("the config says how to run it, on which platform", func(t *testing.T) {
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if cf.OS != "linux" || cf.Architecture != runtime.GOARCH {
			t.Errorf("platform %s/%s, want linux/%s", cf.OS, cf.Architecture, runtime.GOARCH)
		}
		c := cf.Config
		if !slices.Equal(c.Entrypoint, []string{"/usr/local/bin/app"}) || !slices.Equal(c.Cmd, []string{"--flag"}) ||
			c.User != "65532:65532" || c.WorkingDir != "/etc/app" || c.Labels["org.opencontainers.image.version"] != "v1" {
			t.Errorf("config %+v", c)
		}
		if want := []string{"PATH=" + DefaultPath, "MODE=test"}; !slices.Equal(c.Env, want) {
			t.Errorf("env %q, want %q (PATH added when missing)", c.Env, want)
		}
		if len(cf.History) != 2 || cf.History[1].CreatedBy != "COPY app /usr/local/bin/app" {
			t.Errorf("history %+v, want one line per layer", cf.History)
		}
		if !cf.Created.IsZero() {
			t.Errorf("created %v: the image should carry no time", cf.Created)
		}
	})

	t.Run("the filesystem stacks the layers, the upper one winning", func(t *testing.T) {
		files, err := Files(img, "/etc/app/sub/conf", "/usr/local/bin/app")
		if err != nil {
			t.Fatal(err)
		}
		if got := string(files["/etc/app/sub/conf"].Data); got != "x=2\n" {
			t.Errorf("/etc/app/sub/conf = %q, want the upper layer's", got)
		}
		bin := files["/usr/local/bin/app"]
		if bin.Header == nil || bin.Header.Mode != 0o755 || bin.Header.Uid != 0 {
			t.Errorf("/usr/local/bin/app header %+v, want mode 0755 owned by root", bin.Header)
		}
		if l := files["/etc/app/link"].Header; l == nil || l.Typeflag != tar.TypeSymlink || l.Linkname != "sub/conf" {
			t.Errorf("/etc/app/link header %+v, want a symbolic link to sub/conf", l)
		}
		if d := files["/etc/app/private"].Header; d == nil || d.Typeflag != tar.TypeDir || d.Mode != 0o700 {
			t.Errorf("/etc/app/private header %+v, want the lower layer's directory 0700", d)
		}
		for _, p := range []string{"/usr", "/usr/local", "/usr/local/bin", "/etc"} {
			if d := files[p].Header; d == nil || d.Typeflag != tar.TypeDir {
				t.Errorf("parent directory %s missing: %+v", p, d)
			}
		}
	})

	t.Run("the same inputs give the same image", func(t *testing.T) {
		again, _, err := Read(writeTestImage(t))
		if err != nil {
			t.Fatal(err)
		}
		d1, err := img.Digest()
		if err != nil {
			t.Fatal(err)
		}
		d2, err := again.Digest()
		if err != nil {
			t.Fatal(err)
		}
		if d1 != d2 {
			t.Errorf("digests differ: %s and %s", d1, d2)
		}
	})
}

func TestWriteRejectsAnUntaggedReference(t *testing.T) {
	img, err := Build(Config{})
	if err != nil {
		t.Fatal(err)
	}
	for _, ref := range []string{"localhost/app", "localhost/App:v1", ""} {
		if err := Write(filepath.Join(t.TempDir(), "i.tar"), ref, img); err == nil {
			t.Errorf("Write(%q) succeeded, want an error", ref)
		}
	}
}

func TestFilesLayerRejectsRelativePaths(t *testing.T) {
	for _, p := range []string{"usr/bin/x", "/", ""} {
		if _, err := FilesLayer("x", File{Path: p, Data: []byte("x")}); err == nil {
			t.Errorf("FilesLayer(%q) succeeded, want an error", p)
		}
	}
}

func TestCleanRootfs(t *testing.T) {
	var src bytes.Buffer
	tw := tar.NewWriter(&src)
	for _, h := range []tar.Header{
		{Name: "./", Typeflag: tar.TypeDir, Mode: 0o755},
		{Name: "./dev/", Typeflag: tar.TypeDir, Mode: 0o755},
		{Name: "./dev/null", Typeflag: tar.TypeChar, Mode: 0o666, Devmajor: 1, Devminor: 3},
		{Name: "./dev/stdin", Typeflag: tar.TypeSymlink, Linkname: "/proc/self/fd/0"},
		{Name: "./dev/pts/", Typeflag: tar.TypeDir, Mode: 0o755},
		{Name: "./run/fifo", Typeflag: tar.TypeFifo, Mode: 0o644},
		{Name: "./usr/", Typeflag: tar.TypeDir, Mode: 0o755},
		{Name: "./usr/bin/perl", Typeflag: tar.TypeReg, Mode: 0o755, Size: 2},
		{Name: "./usr/bin/perl5", Typeflag: tar.TypeLink, Linkname: "./usr/bin/perl"},
		{Name: "./bin", Typeflag: tar.TypeSymlink, Linkname: "usr/bin"},
	} {
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatal(err)
		}
		if h.Size > 0 {
			if _, err := tw.Write([]byte("hi")); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	var dst bytes.Buffer
	if err := CleanRootfs(&dst, &src); err != nil {
		t.Fatal(err)
	}
	var got []string
	tr := tar.NewReader(&dst)
	for {
		h, err := tr.Next()
		if err != nil {
			break
		}
		got = append(got, h.Name+" -> "+h.Linkname)
	}
	want := []string{"dev/ -> ", "dev/pts/ -> ", "usr/ -> ", "usr/bin/perl -> ", "usr/bin/perl5 -> usr/bin/perl", "bin -> usr/bin"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("entries (-want +got):\n%s", diff)
	}
}

// skopeo is an independent reader of the archive format: what it accepts,
// registries and runtimes accept.
func TestArchiveReadsWithSkopeo(t *testing.T) {
	testenv.RequireCommands(t, "skopeo")
	archive := writeTestImage(t)
	out, err := exec.Command("skopeo", "inspect", "--config", "docker-archive:"+archive).Output()
	if err != nil {
		t.Fatalf("skopeo inspect: %v", err)
	}
	var cf struct {
		OS           string `json:"os"`
		Architecture string `json:"architecture"`
		Config       struct {
			Entrypoint []string
			User       string
		} `json:"config"`
	}
	if err := json.Unmarshal(out, &cf); err != nil {
		t.Fatalf("skopeo's config %s: %v", out, err)
	}
	if cf.OS != "linux" || cf.Architecture != runtime.GOARCH || cf.Config.User != "65532:65532" ||
		!slices.Equal(cf.Config.Entrypoint, []string{"/usr/local/bin/app"}) {
		t.Errorf("skopeo reads %+v", cf)
	}
}
