package layout

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mcsd-io/mcsd/test/lib/repo"
)

// The pages that list every package, and the section of each that does.
var pages = []struct{ file, heading string }{
	{"README.md", "Layout"},
	{"docs/architecture.md", "Every package"},
}

func TestTheDocsListEveryPackageAsTheTreeHasIt(t *testing.T) {
	root, err := repo.Root()
	if err != nil {
		t.Fatal(err)
	}
	tree, err := Packages(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(tree) < 10 {
		t.Fatalf("found only %d packages under %s: %v", len(tree), root, tree)
	}
	for _, p := range pages {
		listed, err := Listed(filepath.Join(root, p.file), p.heading)
		if err != nil {
			t.Fatal(err)
		}
		if err := Compare(p.file, tree, listed); err != nil {
			t.Error(err)
		}
	}
}

func TestAPackageAddedWithoutItsLineFails(t *testing.T) {
	root := t.TempDir()
	write := func(path, body string) {
		t.Helper()
		full := filepath.Join(root, path)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", "module example.com/m\n")
	write("dns/server.go", "package dns\n")
	write("tools/go.mod", "module example.com/tools\n")
	write("tools/tools.go", "package tools\n")
	write("dns/testdata/x.go", "package x\n")
	write("README.md", "# m\n\n## Layout\n\n| directory | job |\n|---|---|\n| `dns/` | the server |\n\n## Next\n\n| `ghost` | not in Layout |\n")

	tree, err := Packages(root)
	if err != nil {
		t.Fatal(err)
	}
	listed, err := Listed(filepath.Join(root, "README.md"), "Layout")
	if err != nil {
		t.Fatal(err)
	}
	if err := Compare("README.md", tree, listed); err != nil {
		t.Fatalf("a page that lists the one package fails: %v", err)
	}

	write("proxier/proxier.go", "package proxier\n")
	tree, err = Packages(root)
	if err != nil {
		t.Fatal(err)
	}
	err = Compare("README.md", tree, listed)
	if err == nil || !strings.Contains(err.Error(), "add a line for: proxier") {
		t.Fatalf("a package added without its line: got %v, want an error naming proxier", err)
	}

	err = Compare("README.md", []string{"dns"}, append(listed, "clustergate"))
	if err == nil || !strings.Contains(err.Error(), "no such package: clustergate") {
		t.Fatalf("a line for a package that is gone: got %v, want an error naming clustergate", err)
	}

	if _, err := Listed(filepath.Join(root, "README.md"), "Packages"); err == nil {
		t.Fatal("a page without the section passed")
	}
}
