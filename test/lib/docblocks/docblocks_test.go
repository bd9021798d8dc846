package docblocks

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

const page = "# Page\n" + // 1
	"\n" + // 2
	"```sh\n" + // 3
	"kubectl mcs join --context MEMBER \\\n" + // 4
	"    --image registry.example.com/mcsd:v0.1.0   # per member\n" + // 5
	"```\n" + // 6
	"\n" + // 7
	"```yaml\n" + // 8
	"kind: Thing\n" + // 9
	"```\n" + // 10
	"1. A step:\n" + // 11
	"   <!-- not run: needs Docker -->\n" + // 12
	"   ```sh\n" + // 13
	"   make image-docker\n" + // 14
	"   ```\n" // 15

func TestParse(t *testing.T) {
	blocks, err := Parse("p.md", page)
	if err != nil {
		t.Fatal(err)
	}
	want := []Block{
		{Page: "p.md", Line: 3, Text: "kubectl mcs join --context MEMBER \\\n    --image registry.example.com/mcsd:v0.1.0   # per member\n"},
		{Page: "p.md", Line: 13, Text: "make image-docker\n", NotRun: "needs Docker"},
	}
	if !reflect.DeepEqual(blocks, want) {
		t.Errorf("got %#v\nwant %#v", blocks, want)
	}
	if got := blocks[1].Where(); got != "p.md:13" {
		t.Errorf("Where: %s", got)
	}
	for text, want := range map[string]string{
		"a\n```sh\nls\n":                      "p.md:2: the fence is never closed",
		"<!-- not run: -->\n```sh\nls\n```\n": "p.md:1: <!-- not run: says not why",
		"<!-- not run: why\n```sh\nls\n```\n": "does not end on its line",
	} {
		if _, err := Parse("p.md", text); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Parse(%q): %v, want %q", text, err, want)
		}
	}
}

func TestReadPageSection(t *testing.T) {
	dir := t.TempDir()
	text := "# T\n```sh\nmake demo\n```\n## Install\n```sh\nkubectl mcs join\n```\n### Sub\n```sh\nkubectl mcs verify\n```\n## Development\n```sh\nmake test\n```\n"
	if err := os.WriteFile(filepath.Join(dir, "R.md"), []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	blocks, err := ReadPage(dir, Page{Path: "R.md", Section: "Install"})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, b := range blocks {
		got = append(got, b.Where()+" "+strings.TrimSpace(b.Text))
	}
	if want := []string{"R.md:6 kubectl mcs join", "R.md:10 kubectl mcs verify"}; !reflect.DeepEqual(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
	if _, err := ReadPage(dir, Page{Path: "R.md", Section: "Nowhere"}); err == nil {
		t.Error("a missing section is no error")
	}
}

func TestCommands(t *testing.T) {
	b := Block{Page: "p.md", Line: 10, Text: "# a comment\n" + // 11
		"kubectl mcs join --broker-context BROKER \\\n" + // 12
		"    --set 'podCIDRs={10.244.0.0/16}' --name \"a b\"   # per member\n" + // 13
		"for node in $(kubectl get nodes -o name); do\n" + // 14
		"  kubectl debug \"$node\" --image=x -- --cleanup\n" + // 15
		"done\n" + // 16
		"cat > f.yaml <<'END'\n" + // 17
		"kubectl not a command\n" + // 18
		"END\n" + // 19
		"kubectl create -f - <<<'{\"kind\":\"X\"}' && KUBECONFIG=x kubectl mcs version | grep v\n"} // 20
	cmds, err := Commands(b)
	if err != nil {
		t.Fatal(err)
	}
	want := []Command{
		{Line: 12, Args: []string{"kubectl", "mcs", "join", "--broker-context", "BROKER", "--set", "podCIDRs={10.244.0.0/16}", "--name", "a b"}},
		{Line: 14, Args: []string{"kubectl", "get", "nodes", "-o", "name"}},
		{Line: 14, Args: []string{"for", "node", "in", "$(...)"}},
		{Line: 15, Args: []string{"kubectl", "debug", "$node", "--image=x", "--", "--cleanup"}},
		{Line: 16, Args: []string{"done"}},
		{Line: 17, Args: []string{"cat", ">", "f.yaml"}},
		{Line: 20, Args: []string{"kubectl", "create", "-f", "-", `{"kind":"X"}`}},
		{Line: 20, Args: []string{"kubectl", "mcs", "version"}},
		{Line: 20, Args: []string{"grep", "v"}},
	}
	if !reflect.DeepEqual(cmds, want) {
		t.Errorf("got\n%+v\nwant\n%+v", cmds, want)
	}
	for text, want := range map[string]string{
		"echo 'open\n":        "p.md:1: unterminated ' quote",
		"cat <<END\nno end\n": "p.md:1: the here-document is never ended by END",
	} {
		if _, err := Commands(Block{Page: "p.md", Line: 0, Text: text}); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Commands(%q): %v, want %q", text, err, want)
		}
	}
}

const table = "# Placeholders\n" + // 1
	"\n" + // 2
	"| placeholder | stands for | the test's value |\n" + // 3
	"|---|---|---|\n" + // 4
	"| `MEMBER` | a member's context | `cluster1` |\n" + // 5
	"| `registry.example.com/mcsd` | the image's repository | `localhost/mcsd` (imported) |\n" + // 6
	"| `v0.1.0` | its tag | the test's tag |\n" + // 7
	"| `10.244.0.0/16` | the pod CIDRs | the member's |\n" + // 8
	"\n" +
	"Words in capitals that are not placeholders: `EOF`, `POD_CIDRS`.\n"

func TestFill(t *testing.T) {
	tb, err := ParseTable("ph.md", table)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"EOF", "POD_CIDRS"}; !reflect.DeepEqual(tb.Literal, want) {
		t.Errorf("literal words %q, want %q", tb.Literal, want)
	}
	if _, err := tb.Filler(map[string]string{"v0.1.0": "v9"}); err == nil || !strings.Contains(err.Error(), "ph.md:8: 10.244.0.0/16 has no value") {
		t.Errorf("a placeholder without a value: %v", err)
	}
	if _, err := tb.Filler(map[string]string{"v0.1.0": "v9", "10.244.0.0/16": "p", "MEMBER": "other"}); err == nil || !strings.Contains(err.Error(), `MEMBER is "cluster1" in the table, but the test has "other"`) {
		t.Errorf("two values: %v", err)
	}
	if _, err := tb.Filler(map[string]string{"v0.1.0": "v9", "10.244.0.0/16": "p", "NS": "x"}); err == nil || !strings.Contains(err.Error(), "the test has a value for NS, which the table lacks") {
		t.Errorf("a value for no placeholder: %v", err)
	}
	f, err := tb.Filler(map[string]string{"v0.1.0": "v0.0.0-a", "10.244.0.0/16": "10.1.0.0/16"})
	if err != nil {
		t.Fatal(err)
	}
	b := Block{Page: "p.md", Line: 4, Text: "kubectl --context MEMBER apply # MEMBERS DNS\n" + // 5
		"x --image registry.example.com/mcsd:v0.1.0 --set 'podCIDRs={10.244.0.0/16}'\n" + // 6
		"cat <<EOF\nname: POD_CIDRS\nEOF\n" + // 7-9
		"echo $KUBECONFIG ${HOME} BROKER other.example.com 10.0.0.0/8 v1.2.3\n"} // 10
	got, unknown := f.Fill(b)
	want := "kubectl --context cluster1 apply # MEMBERS DNS\n" +
		"x --image localhost/mcsd:v0.0.0-a --set 'podCIDRs={10.1.0.0/16}'\n" +
		"cat <<EOF\nname: POD_CIDRS\nEOF\n" +
		"echo $KUBECONFIG ${HOME} BROKER other.example.com 10.0.0.0/8 v1.2.3\n"
	if got != want {
		t.Errorf("filled:\n%s\nwant:\n%s", got, want)
	}
	wantUnknown := []string{
		"p.md:5: MEMBERS looks like a placeholder, but ph.md does not list it",
		"p.md:5: DNS looks like a placeholder, but ph.md does not list it",
		"p.md:10: BROKER looks like a placeholder, but ph.md does not list it",
		"p.md:10: other.example.com looks like a placeholder, but ph.md does not list it",
		"p.md:10: 10.0.0.0/8 looks like a placeholder, but ph.md does not list it",
		"p.md:10: v1.2.3 looks like a placeholder, but ph.md does not list it",
	}
	if !reflect.DeepEqual(unknown, wantUnknown) {
		t.Errorf("unknown:\n%s\nwant:\n%s", strings.Join(unknown, "\n"), strings.Join(wantUnknown, "\n"))
	}
	if got := f.Unused(); len(got) != 0 {
		t.Errorf("unused: %q", got)
	}
	f2, _ := tb.Filler(map[string]string{"v0.1.0": "v0.0.0-a", "10.244.0.0/16": "10.1.0.0/16"})
	f2.Fill(Block{Page: "p.md", Line: 1, Text: "kubectl --context MEMBER get nodes\n"})
	if got, want := f2.Unused(), []string{
		"ph.md:6: registry.example.com/mcsd is in the table, but no block uses it",
		"ph.md:7: v0.1.0 is in the table, but no block uses it",
		"ph.md:8: 10.244.0.0/16 is in the table, but no block uses it",
	}; !reflect.DeepEqual(got, want) {
		t.Errorf("unused:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestCheckCommand(t *testing.T) {
	newRoot := func() *cobra.Command {
		root := &cobra.Command{Use: "tool"}
		root.PersistentFlags().String("context", "", "")
		join := &cobra.Command{Use: "join", Args: cobra.NoArgs, RunE: func(*cobra.Command, []string) error { return nil }}
		join.Flags().String("broker-context", "", "")
		join.Flags().Bool("wait", true, "")
		join.Flags().Duration("timeout", 0, "")
		broker := &cobra.Command{Use: "broker"}
		broker.AddCommand(&cobra.Command{Use: "install", RunE: func(*cobra.Command, []string) error { return nil }})
		root.AddCommand(join, broker)
		return root
	}
	for _, ok := range [][]string{
		{"join", "--context", "m", "--broker-context", "b", "--wait=false", "--timeout", "5m"},
		{"--context", "m", "join"},
		{"broker", "install"},
	} {
		if err := CheckCommand(newRoot(), ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for want, bad := range map[string][]string{
		"unknown flag: --broker-ctx":              {"join", "--broker-ctx", "b"},
		`unknown command "jion"`:                  {"jion"},
		`invalid argument "5" for "--timeout"`:    {"join", "--timeout", "5"},
		`unknown command "x" for "tool join"`:     {"join", "x"},
		"tool broker is not a command on its own": {"broker"},
	} {
		if err := CheckCommand(newRoot(), bad); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", bad, err, want)
		}
	}
}
