package docblocks

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Page is a page whose shell blocks run as tests: all of them, or those
// under one heading (the README's install section, not its development
// commands).
type Page struct {
	Path string
	// Section is the heading's text, without the #s; empty for the whole
	// page.
	Section string
}

// TablePage is the page of the placeholders' table.
const TablePage = "docs/placeholders.md"

// Pages are the install and operate pages, in the order a reader follows
// them. docs/install/kind.md is not among them: its blocks are the
// scripts of test/kind, which test/kind runs in kind.
var Pages = []Page{
	{Path: "README.md", Section: "Install on your clusters"},
	{Path: "docs/install/real-clusters.md"},
	{Path: "docs/operate/using.md"},
	{Path: "docs/operate/configuration.md"},
	{Path: "docs/operate/upgrade.md"},
	{Path: "docs/install/helm.md"},
	{Path: "docs/install/kustomize.md"},
	{Path: "docs/operate/uninstall.md"},
}

// ReadPage returns the shell blocks of p under root, in page order.
func ReadPage(root string, p Page) ([]Block, error) {
	data, err := os.ReadFile(filepath.Join(root, p.Path))
	if err != nil {
		return nil, err
	}
	text := string(data)
	if p.Section == "" {
		return Parse(p.Path, text)
	}
	lines := strings.Split(text, "\n")
	start, level := -1, 0
	for i, line := range lines {
		hashes := len(line) - len(strings.TrimLeft(line, "#"))
		if hashes == 0 || !strings.HasPrefix(line[hashes:], " ") {
			continue
		}
		if start < 0 && strings.TrimSpace(line[hashes:]) == p.Section {
			start, level = i, hashes
			continue
		}
		if start >= 0 && hashes <= level {
			// Blank the rest, keeping the line numbers.
			for j := i; j < len(lines); j++ {
				lines[j] = ""
			}
			break
		}
	}
	if start < 0 {
		return nil, fmt.Errorf("%s: no heading %q", p.Path, p.Section)
	}
	for j := 0; j < start; j++ {
		lines[j] = ""
	}
	return Parse(p.Path, strings.Join(lines, "\n"))
}

// ReadAll returns the blocks of every page of Pages under root, in order.
func ReadAll(root string) ([]Block, error) {
	var all []Block
	for _, p := range Pages {
		blocks, err := ReadPage(root, p)
		if err != nil {
			return nil, err
		}
		all = append(all, blocks...)
	}
	return all, nil
}
