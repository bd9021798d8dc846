package docblocks

import (
	"testing"

	"github.com/mcsd-io/mcsd/test/lib/repo"
)

// The repository's pages read, their commands split, and their
// placeholders are exactly the table's: what test/realnode needs before it
// runs them, checked without a cluster.
func TestRepositoryPages(t *testing.T) {
	root, err := repo.Root()
	if err != nil {
		t.Fatal(err)
	}
	blocks, err := ReadAll(root)
	if err != nil {
		t.Fatal(err)
	}
	table, err := ReadTable(root, TablePage)
	if err != nil {
		t.Fatal(err)
	}
	// The values the real-node test computes, stood in for.
	computed := map[string]string{}
	for _, p := range table.Placeholders {
		if p.Value == "" {
			computed[p.Word] = "<" + p.Word + ">"
		}
	}
	f, err := table.Filler(computed)
	if err != nil {
		t.Fatal(err)
	}
	notRun := 0
	for _, b := range blocks {
		if _, err := Commands(b); err != nil {
			t.Error(err)
		}
		_, unknown := f.Fill(b)
		for _, u := range unknown {
			t.Error(u)
		}
		if b.NotRun != "" {
			notRun++
		}
	}
	for _, u := range f.Unused() {
		t.Error(u)
	}
	t.Logf("%d blocks in %d pages, %d of them not run", len(blocks), len(Pages), notRun)
}
