package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseCommand(t *testing.T) {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		want command
	}{
		{"create as containerd's shim runs it",
			[]string{"--root", "/run/docker/runtime-runc/moby", "--log", "/x/log.json", "--log-format", "json", "--systemd-cgroup", "create", "--bundle", "/b", "--pid-file", "/b/init.pid", "id"},
			command{name: "create", specFile: "/b/config.json"}},
		{"create with the bundle after an equals sign",
			[]string{"create", "--pid-file=/p", "--bundle=/b", "id"},
			command{name: "create", specFile: "/b/config.json"}},
		{"run with the short bundle flag",
			[]string{"run", "-b", "/b", "id"},
			command{name: "run", specFile: "/b/config.json"}},
		{"create without a bundle uses the working directory",
			[]string{"--root", "/r", "create", "id"},
			command{name: "create", specFile: filepath.Join(wd, "config.json")}},
		{"exec reads the process file",
			[]string{"--root", "/r", "exec", "--process", "/tmp/p.json", "--detach", "--pid-file", "/p", "id"},
			command{name: "exec", specFile: "/tmp/p.json", processOnly: true}},
		{"exec with the process on the command line reads no file",
			[]string{"exec", "--cwd", "/", "id", "sh"},
			command{name: "exec"}},
		{"a flag value that looks like the bundle flag is skipped",
			[]string{"create", "--console-socket", "--bundle", "--bundle", "/b", "id"},
			command{name: "create", specFile: "/b/config.json"}},
		{"other commands read no spec",
			[]string{"--root", "/r", "delete", "--force", "id"},
			command{name: "delete"}},
		{"no command", []string{"--version"}, command{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseCommand(tc.args)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("parseCommand(%q) = %+v, want %+v", tc.args, got, tc.want)
			}
		})
	}
	if _, err := parseCommand([]string{"exec", "--process"}); err == nil || !strings.Contains(err.Error(), "--process") {
		t.Errorf("a flag without its value: got %v, want an error naming it", err)
	}
}

func TestBoundSpecFile(t *testing.T) {
	bounding := capabilitySet(0x1fffeffffff) // all but CAP_SYS_RESOURCE
	t.Run("a container spec loses what the bounding set lacks, and nothing else", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "config.json")
		spec := `{"ociVersion":"1.0.2","process":{"capabilities":{` +
			`"bounding":["CAP_CHOWN","CAP_SYS_RESOURCE","CAP_NEW_ONE"],` +
			`"effective":["CAP_SYS_RESOURCE"],"permitted":["CAP_SYS_ADMIN","CAP_SYS_RESOURCE"]}},` +
			`"linux":{"resources":{"memory":{"limit":9223372036854775807}}}}`
		if err := os.WriteFile(path, []byte(spec), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := boundSpecFile(path, false, bounding); err != nil {
			t.Fatal(err)
		}
		got, _ := os.ReadFile(path)
		for _, want := range []string{
			`"bounding":["CAP_CHOWN","CAP_NEW_ONE"]`, `"effective":[]`, `"permitted":["CAP_SYS_ADMIN"]`,
			`"limit":9223372036854775807`, `"ociVersion":"1.0.2"`,
		} {
			if !strings.Contains(string(got), want) {
				t.Errorf("the spec lacks %s:\n%s", want, got)
			}
		}
		if st, _ := os.Stat(path); st.Mode().Perm() != 0o600 {
			t.Errorf("the spec's mode became %v", st.Mode().Perm())
		}
	})
	t.Run("a process spec is bounded at its top level", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "process.json")
		if err := os.WriteFile(path, []byte(`{"args":["sh"],"capabilities":{"bounding":["CAP_SYS_RESOURCE","CAP_KILL"]}}`), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := boundSpecFile(path, true, bounding); err != nil {
			t.Fatal(err)
		}
		if got, _ := os.ReadFile(path); !strings.Contains(string(got), `"bounding":["CAP_KILL"]`) {
			t.Errorf("the process spec was not bounded: %s", got)
		}
	})
	t.Run("a spec within the bounding set is not rewritten", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "config.json")
		spec := `{"process":{"capabilities":{"bounding":["CAP_KILL"]}},  "hostname":"x"}`
		if err := os.WriteFile(path, []byte(spec), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := boundSpecFile(path, false, bounding); err != nil {
			t.Fatal(err)
		}
		if got, _ := os.ReadFile(path); string(got) != spec {
			t.Errorf("the spec changed to %s", got)
		}
	})
	t.Run("a spec that is no JSON is an error naming the file", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "config.json")
		if err := os.WriteFile(path, []byte("{"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := boundSpecFile(path, false, bounding); err == nil || !strings.Contains(err.Error(), path) {
			t.Errorf("got %v, want an error naming %s", err, path)
		}
	})
}

func TestBoundingSetHasTheCapabilitiesEveryProcessHas(t *testing.T) {
	set, err := boundingSet()
	if err != nil {
		t.Fatal(err)
	}
	// Even a sandbox's bounding set keeps what a shell needs to kill
	// its own children.
	if !set["CAP_KILL"] {
		t.Errorf("the bounding set read is %v: no CAP_KILL", set)
	}
}
