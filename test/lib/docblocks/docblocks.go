// Package docblocks reads the shell blocks of the documentation's pages
// (```sh fences), with the page and line of each, so that a test can run
// them as they are written: a command that drifts from what the tools
// accept fails the test, naming where it is written.
//
// A block that cannot run where the tests run (it builds with Docker,
// pushes to a registry) says so in the line right before its fence:
//
//	<!-- not run: why -->
package docblocks

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Block is one shell block of a page.
type Block struct {
	// Page is the page's path as the caller named it, such as
	// docs/install/helm.md.
	Page string
	// Line is the line of the opening fence, from 1.
	Line int
	// Text is the block's content, without the fences and without the
	// indentation of the fence (a block inside a list item).
	Text string
	// NotRun is why the block is not run, from its marker; empty for a
	// block that runs.
	NotRun string
}

// Where is page:line of the block's fence.
func (b Block) Where() string { return fmt.Sprintf("%s:%d", b.Page, b.Line) }

const notRunMarker = "<!-- not run:"

// Read returns the shell blocks of the page at root/page, in page order.
func Read(root, page string) ([]Block, error) {
	data, err := os.ReadFile(filepath.Join(root, page))
	if err != nil {
		return nil, err
	}
	return Parse(page, string(data))
}

// Parse returns the shell blocks (```sh, ```bash, ```shell) of page's
// text, in order. A fence left open is an error naming its line.
func Parse(page, text string) ([]Block, error) {
	var blocks []Block
	lines := strings.Split(text, "\n")
	for i := 0; i < len(lines); i++ {
		trimmed := strings.TrimSpace(lines[i])
		if !strings.HasPrefix(trimmed, "```") {
			continue
		}
		indent := len(lines[i]) - len(strings.TrimLeft(lines[i], " "))
		lang := strings.TrimSpace(strings.TrimPrefix(trimmed, "```"))
		start := i
		var body []string
		closed := false
		for i++; i < len(lines); i++ {
			if strings.TrimSpace(lines[i]) == "```" {
				closed = true
				break
			}
			body = append(body, dedent(lines[i], indent))
		}
		if !closed {
			return nil, fmt.Errorf("%s:%d: the fence is never closed", page, start+1)
		}
		if lang != "sh" && lang != "bash" && lang != "shell" {
			continue
		}
		b := Block{Page: page, Line: start + 1, Text: strings.Join(body, "\n") + "\n"}
		if start > 0 {
			prev := strings.TrimSpace(lines[start-1])
			if strings.HasPrefix(prev, notRunMarker) {
				if !strings.HasSuffix(prev, "-->") {
					return nil, fmt.Errorf("%s:%d: the marker %q does not end on its line with -->", page, start, notRunMarker)
				}
				b.NotRun = strings.TrimSpace(strings.TrimSuffix(strings.TrimPrefix(prev, notRunMarker), "-->"))
				if b.NotRun == "" {
					return nil, fmt.Errorf("%s:%d: %s says not why", page, start, notRunMarker)
				}
			}
		}
		blocks = append(blocks, b)
	}
	return blocks, nil
}

// dedent removes up to n leading spaces: the indentation of a fence in a
// list item, which its content shares.
func dedent(line string, n int) string {
	for n > 0 && strings.HasPrefix(line, " ") {
		line, n = line[1:], n-1
	}
	return line
}
