// Package layout checks that the docs list every Go package of the module
// exactly as the tree has it: the README's Layout section and the package
// list of docs/architecture.md. A package added, moved or removed without
// its line in both fails `make verify`, naming the package and the page.
package layout

import (
	"bufio"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// Packages returns the directories under root, relative and with slashes,
// that hold Go source of the root module: directories of another module
// (their own go.mod, such as test/tools), testdata and hidden or cache
// directories are not the module's packages.
func Packages(root string) ([]string, error) {
	seen := map[string]bool{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			name := d.Name()
			if rel != "." && (strings.HasPrefix(name, ".") || name == "testdata" || name == "bin") {
				return filepath.SkipDir
			}
			if rel != "." {
				if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
					return filepath.SkipDir
				}
			}
			return nil
		}
		if strings.HasSuffix(d.Name(), ".go") {
			seen[filepath.ToSlash(filepath.Dir(rel))] = true
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	pkgs := make([]string, 0, len(seen))
	for p := range seen {
		pkgs = append(pkgs, p)
	}
	slices.Sort(pkgs)
	return pkgs, nil
}

var codeSpan = regexp.MustCompile("`([^`]+)`")

// Listed returns the packages a page names in the first column of the
// tables of the section under heading: every code span there, with a
// trailing slash dropped. A row may name several packages.
func Listed(page, heading string) ([]string, error) {
	f, err := os.Open(page)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var listed []string
	in, found := false, false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			level := len(line) - len(strings.TrimLeft(line, "#"))
			if strings.TrimSpace(line[level:]) == heading {
				in, found = true, true
				continue
			}
			if in && level <= strings.Count(heading, "#")+2 {
				in = false
			}
			continue
		}
		if !in || !strings.HasPrefix(line, "|") {
			continue
		}
		cells := strings.Split(line, "|")
		if len(cells) < 3 {
			continue
		}
		for _, m := range codeSpan.FindAllStringSubmatch(cells[1], -1) {
			listed = append(listed, strings.TrimSuffix(m[1], "/"))
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if !found {
		return nil, fmt.Errorf("%s has no section %q", page, heading)
	}
	return listed, nil
}

// Compare says what a page lists that the tree does not have, and what the
// tree has that the page does not list; nil when they are the same.
func Compare(page string, tree, listed []string) error {
	inTree := map[string]bool{}
	for _, p := range tree {
		inTree[p] = true
	}
	onPage := map[string]bool{}
	var extra, missing []string
	for _, p := range listed {
		onPage[p] = true
		if !inTree[p] {
			extra = append(extra, p)
		}
	}
	for _, p := range tree {
		if !onPage[p] {
			missing = append(missing, p)
		}
	}
	if len(extra) == 0 && len(missing) == 0 {
		return nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s does not list the packages as the tree has them", page)
	if len(missing) > 0 {
		fmt.Fprintf(&b, "; add a line for: %s", strings.Join(missing, ", "))
	}
	if len(extra) > 0 {
		slices.Sort(extra)
		fmt.Fprintf(&b, "; no such package: %s", strings.Join(slices.Compact(extra), ", "))
	}
	return fmt.Errorf("%s", b.String())
}
