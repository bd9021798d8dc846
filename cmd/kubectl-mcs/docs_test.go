package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/mcsd-io/mcsd/test/lib/docblocks"
	"github.com/mcsd-io/mcsd/test/lib/repo"
)

// Every kubectl mcs command of the install and operate pages' shell blocks
// parses as this CLI's: its subcommand exists, its flags are the
// command's and of their type, its arguments are allowed. A command that
// drifts fails here, naming its page and line, without a cluster;
// test/realnode runs the blocks (docs_test.go).
func TestDocsCommandsParse(t *testing.T) {
	root, err := repo.Root()
	if err != nil {
		t.Fatal(err)
	}
	blocks, err := docblocks.ReadAll(root)
	if err != nil {
		t.Fatal(err)
	}
	checked, errs := checkDocCommands(blocks)
	for _, e := range errs {
		t.Error(e)
	}
	if checked == 0 {
		t.Fatal("the pages have no kubectl mcs command")
	}
	t.Logf("%d kubectl mcs commands in %d blocks parse", checked, len(blocks))
}

// The check above fails on a renamed flag, naming the page and line: a copy
// of the real-clusters page whose join says --broker-ctx.
func TestDocsCommandsParseCatchesDrift(t *testing.T) {
	root, err := repo.Root()
	if err != nil {
		t.Fatal(err)
	}
	const page = "docs/install/real-clusters.md"
	data, err := os.ReadFile(filepath.Join(root, page))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(data), "\n")
	line := -1
	for i, l := range lines {
		if strings.HasPrefix(l, "kubectl mcs join --broker-context") {
			line = i
			lines[i] = strings.Replace(l, "--broker-context", "--broker-ctx", 1)
			break
		}
	}
	if line < 0 {
		t.Fatalf("%s has no line starting kubectl mcs join --broker-context", page)
	}
	dir := t.TempDir()
	copied := filepath.Join(dir, page)
	if err := os.MkdirAll(filepath.Dir(copied), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(copied, []byte(strings.Join(lines, "\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	blocks, err := docblocks.Read(dir, page)
	if err != nil {
		t.Fatal(err)
	}
	_, errs := checkDocCommands(blocks)
	want := fmt.Sprintf("%s:%d: kubectl mcs join: unknown flag: --broker-ctx", page, line+1)
	if len(errs) != 1 || errs[0] != want {
		t.Fatalf("with --broker-ctx on line %d: %q, want %q", line+1, errs, want)
	}
	t.Logf("the check says: %s", errs[0])
}

// checkDocCommands parses every kubectl mcs command of blocks, those that
// do not run included, with a new command tree each, and says which do
// not parse, with their page and line.
func checkDocCommands(blocks []docblocks.Block) (int, []string) {
	checked := 0
	var errs []string
	for _, b := range blocks {
		cmds, err := docblocks.Commands(b)
		if err != nil {
			errs = append(errs, err.Error())
			continue
		}
		for _, c := range cmds {
			if len(c.Args) < 2 || c.Args[0] != "kubectl" || c.Args[1] != "mcs" {
				continue
			}
			checked++
			if err := docblocks.CheckCommand(newRoot(genericiooptions.NewTestIOStreamsDiscard()), c.Args[2:]); err != nil {
				errs = append(errs, fmt.Sprintf("%s:%d: %v", b.Page, c.Line, err))
			}
		}
	}
	return checked, errs
}
